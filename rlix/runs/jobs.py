"""Job figures: how long each experiment waited and took, and what that makes over the run.

A pipeline is a job. From the run tables (both drivers write them):

- `arrival_s`: when the core admitted it (drivers register and admit a pipeline when it
  arrives, and a run lists only the pipelines that arrived); null for one the tables list
  that never arrived (never admitted, granted or removed in a run that admitted others: a
  scenario's pipeline due after the run was cut, in folders the simulator wrote when it still
  listed those);
- `start_s`: its first grant (the earliest holding in `allocations`), null if it never held a
  GPU; `queueing_s` = start - arrival;
- `finish_s`: when it was removed (its last step done, or killed, or crashed), null if it was
  still in the run at its end; `jct_s` = finish - arrival for a job that finished, null for
  one that failed (killed or crashed: it never completed, so it has no completion time);
- `alone_s`: its JCT alone on its home (simulated by the caller; null when not given, as for
  executor runs); `slowdown` = jct / alone.

Over the run (`overall.jobs` of summary.json): `count`, `finished` (jobs that completed: not
those still running at the end, nor those killed or crashed), `failed`, `experiments_per_hour`
(finished jobs per hour from the first arrival to the last finish), the mean, median (p50) and
p95 of JCT and of queueing, the mean and p95 of slowdown (percentiles by linear interpolation,
numpy's default; undefined figures are null). The `jobs` table is one row per pipeline with the
per-job figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from rlix.runs.frames import RunTables

JOB_COLUMNS = ("pipeline_id", "arrival_s", "start_s", "queueing_s", "finish_s", "jct_s", "alone_s", "slowdown")


def job_rows(tables: RunTables, alone_s: Mapping[str, float] | None = None,
             first_grant: Mapping[str, float] | None = None) -> pd.DataFrame:
    """One row per pipeline (JOB_COLUMNS), in the order the tables list the pipelines.
    `first_grant` (each pipeline's earliest holding) is read from `allocations` unless given
    (a run that streamed that table keeps it as a total)."""
    alone = dict(alone_s or {})
    if first_grant is None:
        allocations = tables.allocations
        first_grant = (allocations.groupby("pipeline_id", observed=True)["t_start"].min().to_dict()
                       if len(allocations) else {})
    rows = []
    for pid in tables.pipeline_ids:
        start = _float(first_grant.get(pid))
        finish = _float(tables.removed_s.get(pid))
        arrival = _arrival(tables, pid, start, finish)
        jct = None if finish is None or arrival is None or pid in tables.failed else finish - arrival
        own = alone.get(pid)
        rows.append({
            "pipeline_id": pid,
            "arrival_s": arrival,
            "start_s": start,
            "queueing_s": None if start is None or arrival is None else start - arrival,
            "finish_s": finish,
            "jct_s": jct,
            "alone_s": own,
            "slowdown": jct / own if jct is not None and own else None,
        })
    return pd.DataFrame(rows, columns=list(JOB_COLUMNS))


def jobs_overall(rows: pd.DataFrame) -> dict[str, Any]:
    """`overall.jobs` of summary.json from the job rows (see the module docstring)."""
    finished = rows.dropna(subset=["jct_s"])
    failed = int((rows["finish_s"].notna() & rows["jct_s"].isna()).sum())
    out: dict[str, Any] = {"count": len(rows), "finished": len(finished), "failed": failed}
    span_s = (finished["finish_s"].max() - rows["arrival_s"].min()) if len(finished) else 0.0
    out["experiments_per_hour"] = len(finished) * 3600.0 / span_s if span_s > 0 else None
    for name, column in (("jct_s", "jct_s"), ("queueing_s", "queueing_s"), ("slowdown", "slowdown")):
        values = rows[column].dropna().to_numpy(dtype=float)
        stem = name.removesuffix("_s")
        suffix = "_s" if name.endswith("_s") else ""
        out[f"mean_{stem}{suffix}"] = float(values.mean()) if len(values) else None
        if name in ("jct_s", "queueing_s"):
            out[f"p50_{stem}{suffix}"] = float(np.percentile(values, 50)) if len(values) else None
        out[f"p95_{stem}{suffix}"] = float(np.percentile(values, 95)) if len(values) else None
    return out


def _arrival(tables: RunTables, pipeline_id: str, start: float | None, finish: float | None) -> float | None:
    """When the pipeline was admitted; 0.0 for one the log does not admit but that was in the
    run (there from the start: tables made by hand); None for one that never arrived (older
    simulated runs cut before its arrival listed it with the scenario's pipelines)."""
    admitted = tables.admitted_s.get(pipeline_id)
    if admitted is not None:
        return float(admitted)
    never_arrived = tables.admitted_s and start is None and finish is None
    return None if never_arrived else 0.0


def _float(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if np.isnan(value) else value
