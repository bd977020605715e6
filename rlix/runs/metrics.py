"""The figures of `summary.json`: throughput, GPU time shares, step times, waits, preemptions.

Definitions (one scope is the whole pool, "overall", or one pipeline):

- GPU-time in scope: overall, num_gpus x makespan; for a pipeline, the GPU-time it held
  (`allocations`). `held_share` is that pipeline's (or all pipelines') held GPU-time over the
  pool's.
- busy: a held GPU running a stage or an engine with at least one trajectory in flight
  (`activity` rows of kind busy); loading: moving weights (kind loading) and not busy; idle:
  the rest of the GPU-time in scope, held or not. Activity is counted only where its pipeline
  held that GPU, and a GPU's overlapping spans count once. busy + loading + idle = 1.
- steps: rows of `steps` (for multi-LoRA, one per adapter step); steps_per_hour over the
  scope's span: overall the run's makespan, a pipeline its own `active_s`, from its admission
  to its removal (or the end of the run), so a pipeline that arrived late or finished early is
  not diluted by time it was not there; steps_per_hour_per_gpu per GPU-hour in scope (overall:
  per pool GPU; a pipeline: per GPU it held on average); step time t_end - t_start, mean and
  p95. With staleness k >= 1 a step's rollout overlaps earlier steps, so its step time is
  longer than the time between steps: steps_per_hour is the throughput.
- all_active (overall only): the same GPU time shares over the window in which every pipeline
  of the run was admitted and none was removed yet (`t_start`, `t_end`), or null when there is
  no such window: what the policy does with the pool while it has everyone to serve, without
  the ramp of staggered arrivals or the drain after the first pipeline finishes.
- while_waiting (overall only): the same shares over the times at least one job waits to
  start (between its arrival and its first grant; `waiting_s` is how long that is in all),
  or null when no job waited: GPUs idle while experiments queue are what a scheduler is for
  (the idle of an empty pool at the end of a day is not).
- generated_tokens: response tokens of completed trajectories; tokens_per_gpu_hour per
  GPU-hour in scope.
- queue_wait_s: t_grant - t_request of granted non-rollout requests (`waits`), per priority:
  count, mean and p95 (linear interpolation). Priority -1 marks a request re-queued after its
  GPUs were revoked.
- preemptions: trajectory attempts cut short and re-queued (rows of `rollouts` with status
  requeued), whether by a shrink or a lost GPU. `shrinks` counts rollout ranks shrunk, by
  reason (preempt, rebalance, release, reclaim), from the decisions in the event log.
- recomputed_tokens: sum of `rollouts.recomputed_tokens` (prefixes generated again after a
  re-queue); 0 when the table has no such column.
- prefetch_s (per pipeline): the seconds it read its weights into host memory before its
  inits, holding no GPU (`rlix.pipelines.ops.Prefetch`; 0 under a policy that does not).

Undefined figures (a mean of no steps, a rate over no GPU-time) are null.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from rlix.policy.specs import PipelineSpec
from rlix.runs.frames import RunTables, tables_from_recorder
from rlix.runs.intervals import Segments, sweep
from rlix.runs.jobs import job_rows, jobs_overall
from rlix.runs.recorder import Recorder
from rlix.runs.totals import BUSY, HELD, LOADING, RunTotals, active_span, totals_from_tables

SECONDS_PER_HOUR = 3600.0


def summary(source: Recorder | RunTables, specs: dict[str, PipelineSpec] | None = None,
            alone_s: Mapping[str, float] | None = None, totals: RunTotals | None = None,
            prefetch_s: Mapping[str, float] | None = None) -> dict[str, Any]:
    """`summary.json` of a finished run (see the module docstring for each figure, and
    rlix.runs.jobs for the job figures). Each pipeline's kind and staleness bound come from
    `specs`, by default from its registration in the event log; `alone_s` is each pipeline's
    JCT alone on its home, where the caller knows it. `totals` are the long tables reduced
    (rlix.runs.totals), given by a run that streamed them; by default reduced from `source`.
    `prefetch_s`: the seconds each pipeline read weights into host memory before its inits,
    holding no GPU (`Recorder.prefetch_s`, which a recorder gives by default)."""
    if isinstance(source, Recorder):
        prefetch_s = source.prefetch_s if prefetch_s is None else prefetch_s
        tables = tables_from_recorder(source, specs)
    else:
        tables = source if specs is None else dataclasses.replace(source, specs=dict(specs))
    if totals is None:
        totals = totals_from_tables(tables)
    pipeline_ids = tables.pipeline_ids
    gpu_time = totals.cover_s[:, :3]
    pool_s = tables.num_gpus * tables.makespan_s
    trajectories = totals.trajectories
    overall = _scope(tables, tables.steps, trajectories.sum(axis=0), tables.waits, gpu_time.sum(axis=0),
                     pool_s, pool_s, tables.makespan_s)
    overall["shrinks"] = _count_shrinks(tables.shrinks.values())
    overall["all_active"] = _window_shares(tables, totals)
    overall["while_waiting"] = _waiting_shares(tables, totals)
    jobs = job_rows(tables, alone_s, totals.first_grant)
    overall["jobs"] = jobs_overall(jobs)
    job_of = jobs.set_index("pipeline_id").to_dict("index")
    steps, waits = _split(tables.steps), _split(tables.waits)
    per_pipeline = trajectories.reindex(pipeline_ids, fill_value=0)
    pipelines: dict[str, Any] = {}
    for index, pipeline_id in enumerate(pipeline_ids):
        spec = tables.specs.get(pipeline_id)
        held_s = float(gpu_time[index, HELD])
        figures: dict[str, Any] = {
            "kind": spec.kind.value if spec else None,
            "max_staleness": spec.max_staleness if spec else None,
        }
        own_steps = steps.get(pipeline_id, tables.steps.iloc[:0])
        t_start, t_end = active_span(tables, pipeline_id)
        figures["active_s"] = t_end - t_start
        figures.update(_scope(
            tables, own_steps, per_pipeline.loc[pipeline_id], waits.get(pipeline_id, tables.waits.iloc[:0]),
            gpu_time[index], held_s, pool_s, t_end - t_start,
        ))
        figures["shrinks"] = _count_shrinks([tables.shrinks.get(pipeline_id, {})])
        ends = own_steps["t_end"]
        figures["last_step_end_s"] = _num(ends.max()) if len(ends) else None
        figures.update({key: _num(value) for key, value in job_of[pipeline_id].items()})
        figures["prefetch_s"] = float((prefetch_s or {}).get(pipeline_id, 0.0))
        pipelines[pipeline_id] = figures
    return {
        "policy": tables.policy,
        "num_gpus": tables.num_gpus,
        "makespan_s": tables.makespan_s,
        "overall": overall,
        "pipelines": pipelines,
    }


def _window_shares(tables: RunTables, totals: RunTotals) -> dict[str, float] | None:
    """Busy, loading and idle shares of the pool while every pipeline is active (see the module
    docstring), or None when no such window exists."""
    if totals.window is None:
        return None
    t_start, t_end = totals.window
    return {"t_start": t_start, "t_end": t_end, **_shares(totals, 3, tables.num_gpus * (t_end - t_start))}


def _waiting_shares(tables: RunTables, totals: RunTotals) -> dict[str, float] | None:
    """Busy, loading and idle shares of the pool while some job waits to start (see the module
    docstring), or None when no job ever waited."""
    waiting = totals.waiting
    if waiting is None or waiting.total_s <= 0 or tables.num_gpus <= 0:
        return None
    return {"waiting_s": waiting.total_s, **_shares(totals, 5, tables.num_gpus * waiting.total_s)}


def _shares(totals: RunTotals, busy_column: int, pool_s: float) -> dict[str, float]:
    """Shares of `pool_s` GPU-seconds from the busy column of `totals.cover_s` and the loading
    column after it."""
    busy = float(totals.cover_s[:, busy_column].sum()) / pool_s
    loading = float(totals.cover_s[:, busy_column + 1].sum()) / pool_s
    return {"busy_share": busy, "loading_share": loading, "idle_share": 1.0 - busy - loading}


def gpu_time_by_pipeline(cover: GpuCover, num_pipelines: int) -> np.ndarray:
    """GPU-seconds per pipeline (rows, in the order of the pipeline ids `cover` was built
    with): held, busy, loading (columns).

    Busy and loading count only where the pipeline held the GPU; loading excludes busy time.
    """
    out = np.zeros((num_pipelines, 3))
    for column, mask in ((HELD, cover.held), (BUSY, cover.busy), (LOADING, cover.loading)):
        out[:, column] = np.bincount(cover.owner[mask], weights=cover.segments.duration[mask],
                                     minlength=num_pipelines)
    return out


@dataclass(frozen=True)
class GpuCover:
    """The run's GPU time line cut into segments (per pipeline and GPU), with what each was."""

    segments: Segments
    owner: np.ndarray  # index into the pipeline ids of each segment
    gpu: np.ndarray
    held: np.ndarray  # masks over the segments
    busy: np.ndarray
    loading: np.ndarray


def gpu_cover(tables: RunTables, pipeline_ids: list[str]) -> GpuCover:
    code = {pid: i for i, pid in enumerate(pipeline_ids)}
    alloc, act = tables.allocations, tables.activity
    num_gpus = max(tables.num_gpus, 1)
    keys = np.concatenate([_key(alloc, code, num_gpus), _key(act, code, num_gpus)])
    starts = np.concatenate([alloc["t_start"].to_numpy(float), act["t_start"].to_numpy(float)])
    ends = np.concatenate([alloc["t_end"].to_numpy(float), act["t_end"].to_numpy(float)])
    starts, ends = np.clip(starts, 0.0, tables.makespan_s), np.clip(ends, 0.0, tables.makespan_s)
    act_layer = np.where(act["kind"].to_numpy(object) == "loading", LOADING, BUSY)
    layers = np.concatenate([np.full(len(alloc), HELD), act_layer]).astype(np.int64)
    segments = sweep(keys, starts, ends, layers, 3)
    held = segments.covered(HELD)
    busy = held & segments.covered(BUSY)
    loading = held & segments.covered(LOADING) & ~busy
    return GpuCover(segments, segments.keys // num_gpus, segments.keys % num_gpus, held, busy, loading)


def _key(frame: pd.DataFrame, code: dict[str, int], num_gpus: int) -> np.ndarray:
    owners: np.ndarray = frame["pipeline_id"].map(code).to_numpy(np.int64)
    keys: np.ndarray = owners * num_gpus + frame["gpu"].to_numpy(np.int64)
    return keys


def _scope(tables: RunTables, steps: pd.DataFrame, trajectories: pd.Series, waits: pd.DataFrame,
           gpu_s: np.ndarray, scope_s: float, pool_s: float, span_s: float) -> dict[str, Any]:
    span_h = span_s / SECONDS_PER_HOUR
    scope_h = scope_s / SECONDS_PER_HOUR
    num_steps = len(steps)
    step_s = (steps["t_end"] - steps["t_start"]).to_numpy(float)
    tokens = int(trajectories["generated_tokens"])
    busy_s, loading_s = float(gpu_s[BUSY]), float(gpu_s[LOADING])
    return {
        "steps": num_steps,
        "steps_per_hour": _ratio(num_steps, span_h),
        "steps_per_hour_per_gpu": _ratio(num_steps, scope_h),
        "mean_step_time_s": _num(step_s.mean()) if num_steps else None,
        "p95_step_time_s": _num(np.percentile(step_s, 95)) if num_steps else None,
        "gpu_hours": scope_h,
        "held_share": _ratio(float(gpu_s[HELD]), pool_s),
        "busy_share": _ratio(busy_s, scope_s),
        "loading_share": _ratio(loading_s, scope_s),
        "idle_share": _ratio(scope_s - busy_s - loading_s, scope_s),
        "trajectories": int(trajectories["trajectories"]),
        "generated_tokens": tokens,
        "tokens_per_gpu_hour": _ratio(tokens, scope_h),
        "queue_wait_s": _waits_by_priority(waits),
        "preemptions": int(trajectories["preemptions"]),
        "recomputed_tokens": int(trajectories["recomputed_tokens"]),
    }


def _waits_by_priority(waits: pd.DataFrame) -> dict[str, dict[str, Any]]:
    waited = (waits["t_grant"] - waits["t_request"]).to_numpy(float)
    priorities = waits["priority"].to_numpy(np.int64)
    out: dict[str, dict[str, Any]] = {}
    for priority in np.unique(priorities):
        values = waited[priorities == priority]
        out[str(int(priority))] = {
            "count": len(values),
            "mean": _num(values.mean()),
            "p95": _num(np.percentile(values, 95)),
        }
    return out


def _count_shrinks(counters: Any) -> dict[str, int]:
    total = {"preempt": 0, "rebalance": 0, "release": 0, "reclaim": 0}
    for counter in counters:
        for reason, count in counter.items():
            total[reason] = total.get(reason, 0) + int(count)
    return total


def _split(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """One pass over a (possibly very long) table: its rows per pipeline."""
    return {str(pid): part for pid, part in frame.groupby("pipeline_id", sort=False, observed=True)}


def _ratio(numerator: float, denominator: float) -> float | None:
    return float(numerator) / denominator if denominator > 0 else None


def _num(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if np.isfinite(value) else None
