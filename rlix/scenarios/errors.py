"""The one error a bad scenario raises, and how field paths and values are written in it.

`ScenarioError` is a one-line message naming the file, the YAML line, the field path (e.g.
``pipelines[2].clusters.actor_infer.tp``), the value and what is wrong with it:

    agentic.yaml:14: pipelines[2].clusters.actor_infer.tp=3: does not divide the mapping length 32

`FieldProblem` is raised inside the pydantic validators: it carries a path relative to the
model being validated, which the loader joins to pydantic's location and turns into a
`ScenarioError` with the line number.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

#: A field path as pydantic reports locations: field names and list indices.
Path = tuple[str | int, ...]


class _NoValue:
    """The type of NO_VALUE: one instance, which a pickle brings back as itself."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_VALUE"

    def __reduce__(self) -> str:
        return "NO_VALUE"


#: Passed as `value` when there is none to show (e.g. a missing field).
NO_VALUE: object = _NoValue()
_MAX_VALUE_CHARS = 80
#: Containers deeper than this are shown as "..." (a line shows a few levels at most).
_MAX_NESTING = 20


def format_path(path: Sequence[str | int]) -> str:
    """``("pipelines", 2, "clusters", "actor_infer", "tp")`` -> ``pipelines[2].clusters.actor_infer.tp``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


def format_value(value: object) -> str:
    """A short one-line repr (long mappings and lists are cut, newlines never appear)."""
    text = ""
    for piece in _repr_pieces(value, _MAX_NESTING):
        text += piece
        if len(text) > _MAX_VALUE_CHARS:
            break
    text = text.replace("\n", " ")
    if len(text) > _MAX_VALUE_CHARS:
        text = text[: _MAX_VALUE_CHARS - 3] + "..."
    return text


def _repr_pieces(value: object, depth: int) -> Iterator[str]:
    """`repr(value)` piece by piece, so the caller stops after a line: YAML aliases nest a
    list of nine in nine nine times in a few lines, whose full repr would never end."""
    if isinstance(value, list | tuple | dict) and depth <= 0:
        yield "..."
        return
    if type(value) is dict:
        yield "{"
        for index, (key, item) in enumerate(value.items()):
            yield ", " if index else ""
            yield from _repr_pieces(key, depth - 1)
            yield ": "
            yield from _repr_pieces(item, depth - 1)
        yield "}"
    elif type(value) is list or type(value) is tuple:  # not a subclass's own repr (a namedtuple)
        yield "[" if isinstance(value, list) else "("
        for index, item in enumerate(value):
            yield ", " if index else ""
            yield from _repr_pieces(item, depth - 1)
        yield "]" if isinstance(value, list) else ",)" if len(value) == 1 else ")"
    elif isinstance(value, int) and value.bit_length() > 1000:
        # Python refuses to write an integer of over 4,300 digits in decimal.
        yield f"<an integer of {int(value.bit_length() * math.log10(2)) + 1} digits>"
    else:
        yield repr(value)


def first_error(exc: Any) -> dict[str, Any]:
    """The pydantic error (of a ValidationError `exc`) to report: an unknown field first of
    all, as a misspelt field is also reported missing, and its name is the news."""
    errors = exc.errors(include_url=False)
    return next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])


def plain_message(error: dict[str, Any]) -> str:
    """pydantic's message for `error`, as the rest of a one-line error (lower case first)."""
    message = str(error["msg"])
    return message[:1].lower() + message[1:]


class ScenarioError(ValueError):
    """A scenario is invalid. The message is one line: file:line: path=value: problem.

    Attributes: `file` (str or None), `line` (1-based, or None), `path` (the field path as a
    string, "" for file-level problems such as YAML syntax), `value` (the offending value, or
    None when there is none, e.g. a missing field) and `problem`.
    """

    def __init__(
        self,
        problem: str,
        file: str | None = None,
        line: int | None = None,
        path: str = "",
        value: object = NO_VALUE,
    ) -> None:
        self.file = file
        self.line = line
        self.path = path
        self.has_value = value is not NO_VALUE
        self.value = value if self.has_value else None
        self.problem = " ".join(problem.split())
        # args are the constructor's, so that copies (SimPy re-raises a process's exception
        # as type(e)(*e.args), pickling does the same) are whole.
        super().__init__(problem, file, line, path, value)

    def __str__(self) -> str:
        where = self.file or "<scenario>"
        if self.line is not None:
            where += f":{self.line}"
        field = self.path
        if self.has_value:
            field = f"{self.path}={format_value(self.value)}" if self.path else format_value(self.value)
        return f"{where}: {field}: {self.problem}" if field else f"{where}: {self.problem}"


class FieldProblem(ValueError):
    """Raised by a validator: `path` is relative to the model being validated."""

    def __init__(self, path: Path, value: object, problem: str) -> None:
        self.path = path
        self.value = value
        self.problem = problem
        super().__init__(path, value, problem)  # the constructor's args: copies and pickles are whole

    def __str__(self) -> str:
        shown = "" if self.value is NO_VALUE else f"={format_value(self.value)}"
        return f"{format_path(self.path)}{shown}: {self.problem}"
