"""Checks a raw table against the trace schema and returns it with canonical dtypes.

Every known column is checked in full before anything is returned, and the error names the
first bad row of the file (the smallest row over all columns), so nothing is half-loaded and the
user is sent to the first line to fix. Where a row is, is read from the raw frame's index: an
index named FILE_LINE (what io.read_frame gives CSV and JSON Lines files) holds each row's 1-based
line in the file; any other integer index is taken as the 0-based position of the row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import pandas as pd

from rlix.traces.errors import TraceError
from rlix.traces.schema import (
    INPUT_COLUMNS,
    INPUT_KINDS,
    KIND_DTYPES,
    MAX_TOKENS,
    NULLABLE_TEXT,
    REQUIRED_COLUMNS,
    ColumnKind,
)

# The name of a raw frame's index when it holds the file's line numbers (see the docstring).
FILE_LINE = "file_line"
# Integers beyond this do not fit int64 after conversion from float.
MAX_SAFE_INT = 2.0**62
_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})


class Where(TypedDict, total=False):
    """Where a row is, as TraceError takes it: the file's `line`, or the 1-based `row`."""

    line: int
    row: int


@dataclass(frozen=True)
class Problem:
    """The first bad value of one column: where it is and what is wrong."""

    position: int  # 0-based position in the raw frame
    column: str
    message: str
    where: Where

    def error(self, file: str | Path | None, prefix: str = "") -> TraceError:
        """The TraceError that points at this problem in `file`."""
        return TraceError(prefix + self.message, file=file, column=self.column, **self.where)


def locate(index: pd.Index, position: int) -> Where:
    """Where the row at `position` of a raw frame is in its file: ``{"line": N}`` or ``{"row": N}``."""
    label: Any = index[position]
    if index.name == FILE_LINE:
        return {"line": int(label)}
    if isinstance(label, int | np.integer):
        return {"row": int(label) + 1}
    return {"row": position + 1}


def validate_trace(raw: pd.DataFrame, file: str | Path | None = None) -> pd.DataFrame:
    """Return a fresh, validated copy of `raw` with canonical dtypes; raise TraceError.

    Known columns (schema.INPUT_COLUMNS) come first in schema order with canonical dtypes; other
    columns are kept as they are after them. The result has a fresh 0..n-1 index.
    """
    if len(raw.columns) == 0 or len(raw) == 0:
        raise TraceError("empty table: no data rows", file=file)
    for name in REQUIRED_COLUMNS:
        if name not in raw.columns:
            raise TraceError(
                f"missing required column {name!r} (columns are: {column_listing(raw.columns)}); "
                f"name the column that holds it with --column {name}=SOURCE (columns={{{name!r}: SOURCE}} "
                f"in Python)",
                file=file,
            )
    converted: dict[str, pd.Series] = {}
    problems: list[Problem] = []
    for name in INPUT_COLUMNS:
        if name in raw.columns:
            series, problem = check_column(raw[name], name, INPUT_KINDS[name])
            converted[name] = series
            if problem is not None:
                problems.append(problem)
    if problems:
        first = min(problems, key=lambda p: (p.position, INPUT_COLUMNS.index(p.column)))
        raise first.error(file)
    extras = [c for c in raw.columns if c not in converted]
    out = pd.DataFrame(converted)
    for name in extras:
        out[name] = raw[name].copy()
    return out.reset_index(drop=True)


def check_column(raw: pd.Series, name: str, kind: ColumnKind) -> tuple[pd.Series, Problem | None]:
    """Convert one column to its kind's dtype, or report its first bad value."""
    if kind == "text":
        return _check_text(raw, name)
    if kind == "flag":
        return _check_flag(raw, name)
    return _check_number(raw, name, kind)


def _check_number(raw: pd.Series, name: str, kind: ColumnKind) -> tuple[pd.Series, Problem | None]:
    if pd.api.types.is_datetime64_any_dtype(raw) or pd.api.types.is_timedelta64_dtype(raw):
        # pd.to_numeric gives nanoseconds: a Parquet duration of 1.5 s became 1.5e9 seconds.
        every_row = pd.Series(True, index=raw.index)
        problem = _first_problem(
            raw, name, [(every_row, lambda v: f"{v} is a date or a duration, not a number")]
        )
        return raw, problem
    missing = raw.isna()
    values = pd.to_numeric(raw, errors="coerce").astype("float64")
    # JSON true/false would otherwise pass as 1/0; flag them as not numbers.
    values = values.mask(_booleans(raw))
    is_integer = kind != "seconds"
    # Checks in the order a user would fix them; the first that flags a row names its fault.
    checks: list[tuple[pd.Series, Callable[[object], str]]] = [
        (missing, lambda v: "missing value (empty or NaN)"),
        (values.isna() & ~missing, lambda v: f"{v!r} is not a number"),
        (~np.isfinite(values.fillna(0)), lambda v: f"{v} is not a finite number"),
    ]
    if is_integer:
        checks.append((values != np.floor(values.fillna(0)), lambda v: f"{v} is not an integer"))
    if kind in ("length", "count"):
        checks.append((values <= 0, lambda v: f"{v} is not positive (must be at least 1)"))
    elif kind != "integer":
        checks.append((values < 0, lambda v: f"{v} is negative"))
    if kind == "length":
        checks.append(
            (values > MAX_TOKENS, lambda v: f"{v} tokens is absurd (more than {MAX_TOKENS:,})")
        )
    elif is_integer:
        checks.append((values.abs() > MAX_SAFE_INT, lambda v: f"{v} is too large for an integer"))
    problem = _first_problem(raw, name, checks)
    if problem is not None:
        return raw, problem
    return values.astype(KIND_DTYPES[kind]), None


def _booleans(raw: pd.Series) -> pd.Series:
    """Which values are booleans (a whole bool column, or single ones in a mixed column)."""
    if pd.api.types.is_bool_dtype(raw):
        return pd.Series(True, index=raw.index)
    if raw.dtype == object:
        return raw.map(lambda v: isinstance(v, bool | np.bool_)).astype(bool)
    return pd.Series(False, index=raw.index)


def _check_text(raw: pd.Series, name: str) -> tuple[pd.Series, Problem | None]:
    text = raw.astype("string").str.strip()
    if name not in NULLABLE_TEXT:
        empty = text.isna() | (text == "")
        problem = _first_problem(raw, name, [(empty, lambda v: "missing value (empty)")])
        if problem is not None:
            return raw, problem
    return text.mask(text == "", pd.NA), None


def _check_flag(raw: pd.Series, name: str) -> tuple[pd.Series, Problem | None]:
    if pd.api.types.is_bool_dtype(raw) and not raw.isna().any():
        return raw.astype("bool"), None
    words = raw.astype("string").str.strip().str.lower()
    bad = ~(words.isin(_TRUE) | words.isin(_FALSE)).fillna(False)
    problem = _first_problem(raw, name, [(bad, lambda v: f"{v!r} is not true or false")])
    if problem is not None:
        return raw, problem
    return words.isin(_TRUE).astype("bool"), None


def _first_problem(
    raw: pd.Series, name: str, checks: list[tuple[pd.Series, Callable[[object], str]]]
) -> Problem | None:
    """The earliest row flagged by any check; on ties the earlier check names the fault."""
    best: tuple[int, int] | None = None
    for order, (mask, _) in enumerate(checks):
        mask = mask.fillna(False).astype(bool)
        if mask.any():
            position = int(np.argmax(mask.to_numpy()))
            if best is None or position < best[0]:
                best = (position, order)
    if best is None:
        return None
    position, order = best
    value = raw.iloc[position]
    if isinstance(value, np.generic):  # show 5, not np.int64(5)
        value = value.item()
    return Problem(position, name, checks[order][1](value), locate(raw.index, position))


def column_listing(columns: pd.Index, limit: int = 12) -> str:
    """The file's column names for an error message, shortened past `limit`."""
    names = [str(c) for c in columns]
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")
