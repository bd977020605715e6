"""Typed errors raised by the policy core on bad input.

Every error names the offending field and value. The core validates an event completely before
it changes anything, so after an error its state is exactly what it was before the event.
"""

from __future__ import annotations


class PolicyError(Exception):
    """Base class of everything the policy core raises on bad input."""


class FieldError(PolicyError, ValueError):
    """Bad input, named by the field and the value that are wrong."""

    def __init__(self, field: str, value: object, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        # args are the constructor's, so that copies (SimPy re-raises a process's exception
        # as type(e)(*e.args), pickling does the same) are whole.
        super().__init__(field, value, problem)

    def __str__(self) -> str:
        return f"{self.field}={self.value!r}: {self.problem}"


class SpecError(FieldError):
    """A topology or pipeline spec is invalid (a field has a bad value)."""


class EventError(FieldError):
    """An event is inconsistent with the core's state (unknown id, wrong order, ...)."""


class InvariantViolation(PolicyError, AssertionError):
    """The invariant checker found a state or a run that breaks one of the ten invariants."""

    def __init__(self, number: int, detail: str) -> None:
        self.number = number
        self.detail = detail
        # args are the constructor's, so that copies (SimPy re-raises a process's exception
        # as type(e)(*e.args), pickling does the same) are whole.
        super().__init__(number, detail)

    def __str__(self) -> str:
        return f"invariant {self.number} violated: {self.detail}"
