"""What `rlix-sim` sub-commands share for checking their input: argparse types and UsageError.

A type function rejects a bad value while the command line is parsed, so it is reported as
``rlix-sim trace generate: error: argument --rows: must be a positive integer, not '0'`` with status 2
before any work starts. UsageError is for what parsing cannot know (e.g. an option out of range
for the data); `rlix.sim.cli.main` prints it as one line with status 2. It lives in rlix.traces,
the lowest layer with a command (`rlix-sim trace`), so that the trace commands need not import
the simulator, and `python -m rlix.sim.cli` and the sub-command modules share one class.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class UsageError(ValueError):
    """Bad input that no other error class covers (e.g. an option out of range for the data)."""


def path_text(text: str) -> str:
    """A path given on the command line: not empty (an empty --out would mean the default)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path")
    return text


def positive_int(text: str) -> int:
    """An integer of at least 1 (a count of steps, rows, samples)."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}")
    return value


#: The most rows `trace generate` makes: about 4 GB of columns, minutes to write. Far more
#: than any study samples, and below where the process would be killed for memory unannounced.
MAX_GENERATED_ROWS = 10**8


def row_count(text: str) -> int:
    """A number of rows to generate: at least 1, at most MAX_GENERATED_ROWS."""
    value = positive_int(text)
    if value > MAX_GENERATED_ROWS:
        raise argparse.ArgumentTypeError(f"at most {MAX_GENERATED_ROWS:,} rows, not {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """An integer of at least 0 (a seed, a number of lines to show)."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text!r}")
    return value


def positive_number(text: str) -> float:
    """A finite number above 0 (a duration in seconds or days, a bin width)."""
    value = _number(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def non_negative_number(text: str) -> float:
    """A finite number of at least 0 (an exponent, where 0 turns a rule off)."""
    value = _number(text)
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def separated_by_commas(text: str, each: Callable[[str], T], expected: str, example: str) -> list[T]:
    """`text`'s values separated by commas, each read by `each` (whose error stands for a bad
    one); none at all is `expected {expected} separated by commas (e.g. {example})`."""
    values = [each(part.strip()) for part in text.split(",") if part.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"expected {expected} separated by commas (e.g. {example}), got {text!r}")
    return values


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, not {text!r}") from None
