"""Rank-less time: how long each job had rollout work it may run and held no rollout rank.

A job's step waits on its rollout, and its rollout advances only on a rank of its own, so the
seconds in which a job had rollout work left (its latest progress report, `RolloutProgressed`,
per adapter) and held no rollout rank (the `allocations` table) are seconds its rollout
stalled for want of a rank, and its chain of steps with it unless the rollout had slack
there. Splitting them by whether some training gang (any cluster but rollout) held GPUs at
the time says whether the gangs are why: while a gang holds most of a pool, few ranks are
left for the jobs rolling out. Used by `rlix-sim jobs` (rollout_wait_s), `bench/packing.py`
and `bench/rollout_headroom.py`; works on any run folder, simulated or live.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rlix.policy.specs import ROLLOUT_CLUSTER, Priority
from rlix.runs.eventlog import events_path, iter_events
from rlix.runs.intervals import merge, sweep
from rlix.traces.tables import read_table


def open_rollouts(path: Path, end_s: float) -> list[tuple[str, float, float]]:
    """(pipeline, start s, end s) of the spans in which the pipeline's latest progress report
    (`RolloutProgressed`, per adapter) left rollout work, from the event log at `path`
    (events.jsonl); a span still open at the end of the log ends at `end_s`. RunError on an
    unreadable log."""
    remaining: dict[str, dict[str | None, float]] = {}
    since: dict[str, float] = {}
    spans = []
    for _number, event in iter_events(path, frozenset({"RolloutProgressed"})):
        pid, now_s = event["pipeline_id"], float(event["now"])
        left = remaining.setdefault(pid, {})
        was_open = any(n > 0 for n in left.values())
        left[event.get("adapter")] = float(event["remaining"])
        is_open = any(n > 0 for n in left.values())
        if is_open and not was_open:
            since[pid] = now_s
        elif was_open and not is_open:
            spans.append((pid, since.pop(pid), now_s))
    spans += [(pid, start_s, max(start_s, end_s)) for pid, start_s in since.items()]
    return spans


def rankless_by_job(open_spans: list[tuple[str, float, float]], allocations: pd.DataFrame,
                    start_s: float = -np.inf) -> pd.DataFrame:
    """Per pipeline (the index), the seconds after `start_s` with rollout work open and no
    rollout rank held (`rankless_s`), and those of them while any training gang held GPUs
    (`rankless_in_gangs_s`). `allocations` is a run's allocations table (pipeline_id, cluster,
    t_start, t_end)."""
    ids = sorted({pid for pid, _, _ in open_spans} | set(allocations["pipeline_id"].astype(str)))
    key = {pid: i for i, pid in enumerate(ids)}
    rollout = allocations[allocations["cluster"] == ROLLOUT_CLUSTER]
    gangs = allocations[allocations["cluster"] != ROLLOUT_CLUSTER]
    parts = [  # (keys, starts, ends, layer): 0 work open, 1 a rank held, 2 a gang anywhere
        ([key[p] for p, _, _ in open_spans], [s for _, s, _ in open_spans], [e for _, _, e in open_spans], 0),
        (rollout["pipeline_id"].astype(str).map(key), rollout["t_start"], rollout["t_end"], 1),
    ]
    # Every job sees every gang: their union first (one row per GPU held would be repeated per job).
    _, gang_starts, gang_ends = merge(np.zeros(len(gangs), dtype=np.int64), gangs["t_start"].to_numpy(float),
                                      gangs["t_end"].to_numpy(float))
    for i in range(len(ids)):
        parts.append(([i] * len(gang_starts), gang_starts, gang_ends, 2))
    keys = np.concatenate([np.asarray(k, dtype=np.int64) for k, _, _, _ in parts])
    starts = np.concatenate([np.asarray(s, dtype=float) for _, s, _, _ in parts]).clip(min=start_s)
    ends = np.concatenate([np.asarray(e, dtype=float) for _, _, e, _ in parts])
    layers = np.concatenate([np.full(len(k), layer, dtype=np.int64) for k, _, _, layer in parts])
    segments = sweep(keys, starts, ends, layers, 3)
    seconds = segments.duration * (segments.covered(0) & ~segments.covered(1))
    return pd.DataFrame(
        {"rankless_s": np.bincount(segments.keys, weights=seconds, minlength=len(ids)),
         "rankless_in_gangs_s": np.bincount(segments.keys, weights=seconds * segments.covered(2), minlength=len(ids))},
        index=pd.Index(ids, name="pipeline_id"))


def rankless(open_spans: list[tuple[str, float, float]], allocations: pd.DataFrame, start_s: float) -> dict[str, float]:
    """`rankless_by_job` summed over jobs, and the largest one job's (`most_rankless_s`)."""
    per_job = rankless_by_job(open_spans, allocations, start_s)
    return {"rankless_s": float(per_job["rankless_s"].sum()),
            "rankless_in_gangs_s": float(per_job["rankless_in_gangs_s"].sum()),
            "most_rankless_s": float(per_job["rankless_s"].max()) if len(per_job) else 0.0}


def run_rankless(run_dir: Path, end_s: float, start_s: float | None = None) -> dict[str, float]:
    """`rankless` of the run in `run_dir` (its event log and allocations table) from
    `start_s`, by default the end of the run's last init (its first allocation's start if it
    has none), with rollout work still open at `end_s` (the makespan) counted up to it."""
    allocations = read_table(run_dir, "allocations")
    if start_s is None:
        inits = allocations[allocations["priority"] == Priority.INIT]
        start_s = float(inits["t_end"].max()) if len(inits) else float(allocations["t_start"].min())
    return rankless(open_rollouts(events_path(run_dir), end_s), allocations, start_s)
