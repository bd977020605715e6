"""The run-output tables of DESIGN.md (allocations, steps, rollouts): write and read them back.

Both drivers write these through here, so the simulator and the executor produce the same
files. Parquet is the default; CSV on request. Required columns are checked and cast to their
dtypes (schema.TABLE_COLUMNS) on the way out and on the way in; more columns are kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pandas as pd

from rlix.traces.errors import TraceError
from rlix.traces.io import read_frame, write_frame
from rlix.traces.schema import (
    RESPONSE_TOKENS,
    ROLLOUT_STATUSES,
    TABLE_COLUMNS,
    TABLE_NAMES,
    ColumnKind,
    TableName,
)
from rlix.traces.validate import check_column, locate

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
    """A copy of `frame` with required columns first, in their dtypes; TraceError otherwise."""
    required = TABLE_COLUMNS[name]
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise TraceError(
            f"{name} table lacks required column(s) {', '.join(missing)} "
            f"(required: {', '.join(required)})",
            file=file,
        )
    out = pd.DataFrame(index=frame.index)
    for column, dtype in required.items():
        out[column] = _cast(frame[column], column, dtype, file)
    for column in frame.columns:
        if column not in required:
            out[column] = frame[column]
    if name == "rollouts":
        _check_rollouts(out, file)
    return out.reset_index(drop=True)


def _cast(series: pd.Series, column: str, dtype: str, file: str | Path) -> pd.Series:
    if dtype == "string":
        # Empty text means "none" (e.g. no adapter for a full-finetune pipeline).
        text = series.astype("string")
        return text.mask(text == "", pd.NA)
    # Integers may be negative here: dp_rank is -1 for non-rollout clusters.
    kind: ColumnKind = "seconds" if dtype == "float64" else "integer"
    checked, problem = check_column(series, column, kind)
    if problem is not None:
        raise problem.error(file)
    return checked


def _check_rollouts(frame: pd.DataFrame, file: str | Path) -> None:
    status = frame["status"]
    bad = ~status.isin(ROLLOUT_STATUSES).fillna(False).astype(bool)
    if bad.any():
        position = int(bad.to_numpy().argmax())
        raise TraceError(
            f"status {status.iloc[position]!r} is not one of {', '.join(ROLLOUT_STATUSES)}",
            file=file,
            column="status",
            **locate(frame.index, position),
        )
    completed = frame[(status == "completed").fillna(False).astype(bool)]
    _, problem = check_column(completed[RESPONSE_TOKENS], RESPONSE_TOKENS, "length")
    if problem is not None:
        raise problem.error(file, prefix="completed rollout: ")


def _table_name(name: str, file: str | Path | None = None) -> TableName:
    if name not in TABLE_NAMES:
        raise TraceError(
            f"unknown run table {name!r}; run tables are {', '.join(TABLE_NAMES)}", file=file
        )
    return name
