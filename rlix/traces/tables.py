"""The run-output tables of DESIGN.md (allocations, steps, rollouts): write and read them back.

Both drivers write these through here, so the simulator and the executor produce the same
files: whole (`write_table`) or, for a run that streams its record, a piece at a time
(`TableStream`). Parquet is the default; CSV on request. Required columns are checked and cast to their
dtypes (schema.TABLE_COLUMNS) on the way out and on the way in; more columns are kept. An
integer column already held as a narrower signed integer (int8/16/32, as the simulator keeps
ids and token counts) keeps its width: int64 is the widest a column gets, not the only width.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from rlix.traces.errors import TraceError
from rlix.traces.io import read_frame, write_frame
from rlix.traces.schema import (
    MAX_TOKENS,
    OPTIONAL_SECONDS,
    RESPONSE_TOKENS,
    ROLLOUT_STATUSES,
    TABLE_COLUMNS,
    ColumnKind,
    TableName,
)
from rlix.traces.validate import MAX_SAFE_INT, check_column, locate

TableFormat = Literal["parquet", "csv"]


def table_path(run_dir: str | Path, name: TableName, format: TableFormat = "parquet") -> Path:
    """Where table `name` of the run in `run_dir` lives: ``run_dir/<name>.<format>``."""
    return Path(run_dir) / f"{_table_name(name)}.{format}"


def write_table(
    frame: pd.DataFrame, run_dir: str | Path, name: TableName, format: TableFormat = "parquet"
) -> Path:
    """Check and write table `name` into `run_dir`; return the file written.

    Raises TraceError for a missing required column, a value that does not fit its dtype, an
    unknown rollout status, or a completed rollout without a positive `response_tokens` (the
    rollouts table must replay as a trace).
    """
    if format not in ("parquet", "csv"):
        raise TraceError(f"run tables are parquet or csv, not {format!r}")
    path = table_path(run_dir, name, format)
    return write_frame(conform_table(frame, name, path), path, format)


class TableStream:
    """Table `name` of a run written as it grows: each `write` checks a piece of rows as
    `write_table` does and appends it (a Parquet row group, or CSV lines), so a long run's
    table never sits in memory whole. `close` ends the file (an empty table if nothing came)."""

    def __init__(self, run_dir: str | Path, name: TableName, format: TableFormat = "parquet") -> None:
        if format not in ("parquet", "csv"):
            raise TraceError(f"run tables are parquet or csv, not {format!r}")
        self.name, self.format = name, format
        self.path = table_path(run_dir, name, format)
        self._writer: Any = None  # pyarrow's ParquetWriter, opened with the first piece's schema
        self._schema: Any = None
        self._pieces = 0
        self.num_rows = 0

    def write(self, frame: pd.DataFrame) -> None:
        frame = conform_table(frame, self.name, self.path)
        if self.format == "csv":
            frame.to_csv(self.path, index=False, mode="a" if self._pieces else "w", header=not self._pieces)
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pandas(frame, schema=self._schema, preserve_index=False)
            if self._writer is None:
                self._schema = table.schema
                self._writer = pq.ParquetWriter(self.path, self._schema)
            self._writer.write_table(table)
        self._pieces += 1
        self.num_rows += len(frame)

    def close(self, empty: pd.DataFrame) -> Path:
        """End the file; `empty` (the table's columns, no rows) is written if no piece came."""
        if not self._pieces:
            write_frame(conform_table(empty, self.name, self.path), self.path, self.format)
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        return self.path


def read_table(path: str | Path, name: TableName | None = None) -> pd.DataFrame:
    """Read a run-output table back with required columns in their dtypes.

    `path` is the table file, or a run folder together with `name` (Parquet is looked for
    first, then CSV). The table's name is taken from the file name when not given.
    """
    path = Path(path)
    if path.is_dir():
        if name is None:
            raise TraceError("name the table to read from a run folder", file=path)
        candidates = [table_path(path, name, fmt) for fmt in ("parquet", "csv")]
        path = next((p for p in candidates if p.exists()), candidates[0])
    table = _table_name(name or path.stem, path)
    return conform_table(read_frame(path), table, path)


def conform_table(frame: pd.DataFrame, name: TableName, file: str | Path) -> pd.DataFrame:
    """`frame` with required columns first, in their dtypes; TraceError otherwise. Columns
    already in their dtype (a driver's own output) are checked without a converted copy, so a
    table of 10^8 rollouts conforms in about its own size of memory."""
    required = TABLE_COLUMNS[name]
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise TraceError(
            f"{name} table lacks required column(s) {', '.join(missing)} "
            f"(required: {', '.join(required)})",
            file=file,
        )
    columns = {column: _cast(frame[column], column, dtype, file) for column, dtype in required.items()}
    columns.update({column: frame[column] for column in frame.columns if column not in required})
    out = pd.DataFrame(columns, index=frame.index, copy=False)  # no consolidating copy
    if name == "rollouts":
        _check_rollouts(out, file)
    # A file's frame is indexed by its lines (for the errors above); a driver's by position.
    return out if _is_default_index(out.index) else out.reset_index(drop=True)


def _is_default_index(index: pd.Index) -> bool:
    return isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1


def _cast(series: pd.Series, column: str, dtype: str, file: str | Path) -> pd.Series:
    if dtype == "string":
        if isinstance(series.dtype, pd.CategoricalDtype):
            # Few values over many rows (a simulator's rollouts): convert the categories only.
            categories = series.cat.categories.astype("string")
            text = series.cat.rename_categories(categories)
            return text.cat.remove_categories([""]) if "" in categories else text
        # Empty text means "none" (e.g. no adapter for a full-finetune pipeline).
        text = series.astype("string")
        return text.mask(text == "", pd.NA)
    if dtype == OPTIONAL_SECONDS:
        return _optional_seconds(series, column, file)
    # Integers may be negative here: dp_rank is -1 for non-rollout clusters.
    kind: ColumnKind = "seconds" if dtype == "float64" else "integer"
    if _plainly_valid(series, kind):
        if kind == "integer" and series.dtype.kind == "i":
            # A narrower signed integer column stays as it is: a simulated day's 10^8 rollout
            # rows take 51 bytes a row with 32-bit counts and ids, 83 widened to int64.
            return series
        return series.astype(dtype)  # no copy when it is that dtype already (copy on write)
    checked, problem = check_column(series, column, kind)
    if problem is not None:
        raise problem.error(file)
    return checked


def _optional_seconds(series: pd.Series, column: str, file: str | Path) -> pd.Series:
    """A float64 column where NaN means unknown (a job that never started); other values are
    finite and >= 0."""
    values = pd.to_numeric(series, errors="coerce").astype("float64")
    invalid = values.notna() & ~((values >= 0) & np.isfinite(values))
    unparsed = values.isna() & series.notna()
    bad = invalid | unparsed
    if bad.any():
        row = bad.idxmax()
        # a number as written (-7.62), text quoted ('soon'): numpy's repr would show np.float64(-7.62)
        shown = repr(series[row]) if unparsed[row] else str(series[row])
        raise TraceError(f"column {column!r}: {shown} is not a number >= 0 or empty", file=file)
    return values


def _plainly_valid(series: pd.Series, kind: ColumnKind) -> bool:
    """Whether a numpy-typed column passes `check_column` for `kind` as it stands (the checks
    on the values themselves, no float copy); anything else goes the long way, which also
    names the first bad value."""
    values = series.to_numpy() if isinstance(series.dtype, np.dtype) else None
    if values is None or values.dtype == bool:
        return False
    if values.dtype.kind in "iu":
        if not len(values):
            return True
        in_range = max(-int(values.min()), int(values.max())) <= MAX_SAFE_INT
        return in_range and (kind != "seconds" or int(values.min()) >= 0)
    if values.dtype.kind == "f" and kind == "seconds":
        return bool(np.isfinite(values).all() and (values >= 0).all())
    return False


def _check_rollouts(frame: pd.DataFrame, file: str | Path) -> None:
    status = frame["status"]
    if isinstance(status.dtype, pd.CategoricalDtype):
        # By category (a simulator's 10^8-row table): a code is bad when its category is not
        # a status, or -1 (missing), which indexes the appended False.
        known = np.array([c in ROLLOUT_STATUSES for c in status.cat.categories] + [False])
        bad = pd.Series(~known[status.cat.codes.to_numpy()], index=frame.index)
    else:
        bad = ~status.isin(ROLLOUT_STATUSES).fillna(False).astype(bool)
    if bad.any():
        position = int(bad.to_numpy().argmax())
        raise TraceError(
            f"status {status.iloc[position]!r} is not one of {', '.join(ROLLOUT_STATUSES)}",
            file=file,
            column="status",
            **locate(frame.index, position),
        )
    completed = (status == "completed").fillna(False).to_numpy(bool)
    values = frame[RESPONSE_TOKENS].to_numpy()
    if values.dtype.kind in "iu" and not (completed & ((values <= 0) | (values > MAX_TOKENS))).any():
        return  # the common case, checked without selecting the completed rows (10^8 of them)
    tokens = frame[RESPONSE_TOKENS][completed]
    _, problem = check_column(tokens, RESPONSE_TOKENS, "length")
    if problem is not None:
        raise problem.error(file, prefix="completed rollout: ")


def _table_name(name: str, file: str | Path | None = None) -> TableName:
    if name not in TABLE_COLUMNS:
        raise TraceError(
            f"unknown run table {name!r}; run tables are {', '.join(TABLE_COLUMNS)}", file=file
        )
    return name
