"""The invariant checker for a finished run's tables, shared by the simulator and executor tests.

Drivers write the run-output tables of DESIGN.md; this module checks them against the
invariants that can be seen in a record of the past:

1. no GPU has two holders at any instant (allocation intervals on a GPU never overlap);
2. a non-rollout holding covers exactly its cluster's mapping, a rollout rank exactly its bundle;
7. every consumed trajectory came from weights of version >= step_consumed - max_staleness;
8. no trajectory is lost: a re-queued trajectory is later completed, in flight at the end, or
   aborted because its pipeline went away.

Rows are plain mappings (e.g. `DataFrame.to_dict("records")`), so this stays standard library.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from itertools import groupby
from operator import itemgetter
from typing import Any

from rlix.policy.errors import InvariantViolation
from rlix.policy.specs import BASE_ADAPTER, PipelineSpec

Row = Mapping[str, Any]
#: A trajectory: (pipeline id, adapter, trajectory id).
Key = tuple[str, str, object]
#: Allocation intervals may touch (one ends when the next starts) within this tolerance.
TIME_EPS_S = 1e-9


def check_allocations(rows: Iterable[Row], specs: Mapping[str, PipelineSpec],
                      spec_at: Callable[[str, float], PipelineSpec | None] | None = None) -> None:
    """Invariants 1 and 2 over the holding rows. `spec_at(pipeline, t)`, when given, is the
    pipeline's spec as placed at time t (a run resumed may place a sized home elsewhere);
    otherwise `specs` holds for the whole run."""
    by_gpu: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    groups: dict[tuple[str, str, int, float], set[int]] = defaultdict(set)
    for row in rows:
        t_start, t_end = float(row["t_start"]), float(row["t_end"])
        who = f"{row['pipeline_id']}/{row['cluster']}/rank{row['dp_rank']}"
        if t_end < t_start - TIME_EPS_S:
            raise InvariantViolation(1, f"{who} on GPU {row['gpu']} ends before it starts")
        by_gpu[int(row["gpu"])].append((t_start, t_end, who))
        groups[(str(row["pipeline_id"]), str(row["cluster"]), int(row["dp_rank"]), t_start)].add(int(row["gpu"]))
    for gpu, intervals in by_gpu.items():
        intervals.sort()
        for (_s0, e0, w0), (s1, _e1, w1) in zip(intervals, intervals[1:], strict=False):
            if s1 < e0 - TIME_EPS_S:
                raise InvariantViolation(1, f"GPU {gpu} held by {w0} until {e0} and by {w1} from {s1}")
    for (pipeline_id, cluster, dp_rank, t_start), gpus in groups.items():
        spec = specs.get(pipeline_id) if spec_at is None else spec_at(pipeline_id, t_start)
        if spec is None or cluster not in spec.clusters:
            raise InvariantViolation(2, f"allocation for unknown {pipeline_id}/{cluster}")
        cluster_spec = spec.clusters[cluster]
        expected = set(cluster_spec.mapping if dp_rank < 0 else cluster_spec.bundle(dp_rank))
        if gpus != expected:
            raise InvariantViolation(
                2, f"{pipeline_id}/{cluster} rank {dp_rank} at t={t_start} held {sorted(gpus)}, expected {sorted(expected)}"
            )


def check_rollouts(
    rows: Iterable[Row], specs: Mapping[str, PipelineSpec], *, grouped_by_trajectory: bool = False
) -> None:
    """Invariants 7 and 8 over the attempt rows. With `grouped_by_trajectory` the caller
    promises that every trajectory's attempts come one after another (e.g. rows sorted by
    pipeline, adapter and trajectory): the rows are then checked as a stream, one trajectory in
    memory at a time, which a simulated day of 10^8 attempts needs. Otherwise they may come in
    any order and are all kept until the end."""
    keyed = ((_check_attempt(row, specs), row) for row in rows)
    groups: Iterable[tuple[Key, list[Row]]]
    if grouped_by_trajectory:
        groups = ((key, [row for _, row in group]) for key, group in groupby(keyed, key=itemgetter(0)))
    else:
        history: dict[Key, list[Row]] = defaultdict(list)
        for key, row in keyed:
            history[key].append(row)
        groups = history.items()
    for key, attempts in groups:
        _check_trajectory(key, attempts)


def _check_attempt(row: Row, specs: Mapping[str, PipelineSpec]) -> Key:
    """Invariant 7 and a known status for one attempt; returns its trajectory's key."""
    pipeline_id = str(row["pipeline_id"])
    adapter = str(row.get("adapter") or BASE_ADAPTER)
    status = row["status"]
    if status not in ("completed", "requeued", "aborted", "in_flight"):
        raise InvariantViolation(8, f"trajectory {row['trajectory_id']} has status {status!r}")
    spec = specs.get(pipeline_id)
    if spec is None or adapter not in spec.adapter_names:  # a row of no pipeline or adapter the run had
        raise InvariantViolation(7, f"trajectory {row['trajectory_id']} of unknown {pipeline_id}/{adapter}")
    if status == "completed":
        bound = int(row["step_consumed"]) - spec.staleness_of(adapter)
        if int(row["weight_version"]) < bound:
            raise InvariantViolation(
                7, f"{pipeline_id}/{adapter} trajectory {row['trajectory_id']} of version "
                   f"{row['weight_version']} consumed by step {row['step_consumed']}"
            )
    return (pipeline_id, adapter, row["trajectory_id"])


def _check_trajectory(key: Key, attempts: list[Row]) -> None:
    """Invariant 8 for all the attempts of one trajectory."""
    pipeline_id, adapter, trajectory_id = key
    attempts = sorted(attempts, key=lambda r: float(r["t_start"]))
    if attempts[-1]["status"] == "requeued":
        raise InvariantViolation(
            8, f"{pipeline_id}/{adapter} trajectory {trajectory_id} was re-queued and never finished"
        )
    finished = [r for r in attempts if r["status"] == "completed"]
    if len(finished) > 1:
        raise InvariantViolation(8, f"{pipeline_id}/{adapter} trajectory {trajectory_id} completed twice")


def check_run(
    specs: Mapping[str, PipelineSpec],
    allocations: Iterable[Row],
    rollouts: Iterable[Row] = (),
) -> None:
    """Raise `InvariantViolation` on the first broken invariant of a finished run."""
    check_allocations(allocations, specs)
    check_rollouts(rollouts, specs)
