"""A job log as the arrivals of a scenario: `--jobs FILE` or `jobs: {path, columns}`.

The file (CSV, JSON Lines or Parquet, read as traces are) has one row per job with columns
`id`, `template` (a name in the scenario's `templates:`) and `arrival`: seconds from the start,
or timestamps (a Slurm `sacct` Submit column, an AcmeTrace `submit_time`), counted from the
first. Any other column named like a pipeline field (`steps`, `max_staleness`,
`prompts_per_step`, ...) overrides the template for that job. A column map (`--jobs-column
arrival=Submit`, `columns:` in the scenario) names where each comes from, so a foreign log is
read as it is. Each row becomes a pipeline `{**template, **overrides, id, arrival_s}` after the
scenario's own pipelines.

Bad input is one error naming the file (and the row and column where there is one): no such
file, a missing column, an unknown template, a negative or unparseable arrival, an empty log.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from rlix.scenarios.errors import FieldProblem
from rlix.scenarios.pipelines import PipelineConfig
from rlix.traces.columns import apply_column_map
from rlix.traces.errors import TraceError
from rlix.traces.io import read_frame

REQUIRED = ("id", "template", "arrival")
#: Pipeline fields a job log may override per job.
OVERRIDES = tuple(name for name in PipelineConfig.model_fields if name not in ("id", "arrival_s", "adapters"))


def read_jobs(path: str | Path, columns: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The log's jobs as {id, template, arrival_s, overrides...}, in file order (TraceError)."""
    for target in columns or {}:
        if target not in REQUIRED and target not in OVERRIDES:
            raise TraceError(f"jobs column map target {target!r} is not one of {', '.join(REQUIRED + OVERRIDES)}")
    frame = apply_column_map(read_frame(path), columns or {}, file=path)
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise TraceError(f"the job log has no column {', '.join(missing)} (map one with --jobs-column "
                         f"{missing[0]}=SOURCE; columns are: {', '.join(map(str, frame.columns))})", file=path)
    if frame.empty:
        raise TraceError("the job log has no rows", file=path)
    arrivals = _arrivals(frame["arrival"], path)
    extra = [c for c in frame.columns if c in OVERRIDES]
    jobs = []
    for (_row, record), arrival in zip(frame.iterrows(), arrivals, strict=True):
        job = {"id": str(record["id"]), "template": str(record["template"]), "arrival_s": arrival}
        for column in extra:
            value = record[column]
            value = value.item() if hasattr(value, "item") else value
            if isinstance(value, float) and math.isnan(value):
                continue  # the template's value
            # a column with blanks is read as floats: 3.0 steps is 3
            job[column] = int(value) if isinstance(value, float) and value.is_integer() else value
        jobs.append(job)
    return jobs


def _arrivals(column: pd.Series, path: str | Path) -> list[float]:
    """Seconds from the start: numbers as they are (>= 0), timestamps from the first."""
    numbers = pd.to_numeric(column, errors="coerce")
    if numbers.notna().all():
        bad = numbers[(numbers < 0) | ~numbers.map(math.isfinite)]
        if len(bad):
            raise TraceError(f"row {bad.index[0]}: column arrival: {_plain(column[bad.index[0]])!r} is not "
                             "seconds >= 0", file=path)
        return [float(v) for v in numbers]
    times = pd.to_datetime(column, errors="coerce", utc=True, format="mixed")
    if times.isna().any():
        row = times[times.isna()].index[0]
        raise TraceError(f"row {row}: column arrival: {_plain(column[row])!r} is neither seconds nor a timestamp",
                         file=path)
    first = times.min()
    return [float((t - first).total_seconds()) for t in times]


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def job_pipelines(jobs: list[dict[str, Any]], templates: dict[str, dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """Pipelines from `jobs` (see the module docstring); FieldProblem at `jobs` for a job whose
    template is unknown."""
    out = []
    for job in jobs:
        template = templates.get(job["template"])
        if template is None:
            raise FieldProblem(("jobs",), job["template"], f"{where}: job {job['id']!r} names an unknown template "
                               f"(known: {', '.join(templates) or 'none'})")
        fields = {k: v for k, v in job.items() if k != "template"}
        out.append({**template, **fields})
    return out
