"""Each check of `rlix.policy.run_checks` against a run table that breaks it.

Every case is a small table that a run could have written, first in a form that passes, then
changed in one place so that it breaks exactly one invariant; `check_run` (what the drivers'
tests call) must report that invariant's number. Boundaries are pinned both ways: intervals
that touch are fine, a trajectory of exactly version step - k is fine.
"""

from __future__ import annotations

from typing import Any

import pytest

from rlix.policy import InvariantViolation
from rlix.policy.run_checks import check_run
from rlix.policy.specs import BASE_ADAPTER
from tests.policy.builders import full_finetune

# A: rollout TP 2 on GPUs 0-3 (ranks on 0-1 and 2-3), trains on 0-1, staleness 1.
# B: rollout TP 1 on GPUs 0-3, trains on 2-3, on-policy.
SPECS = {
    "A": full_finetune("A", (0, 1, 2, 3), (0, 1), tp=2, max_staleness=1),
    "B": full_finetune("B", (0, 1, 2, 3), (2, 3)),
}


def alloc(pid: str, cluster: str, rank: int, gpus: tuple[int, ...], t0: float, t1: float) -> list[dict[str, Any]]:
    return [{"pipeline_id": pid, "cluster": cluster, "priority": 1, "dp_rank": rank, "gpu": g,
             "t_start": t0, "t_end": t1} for g in gpus]


def good_allocations() -> list[dict[str, Any]]:
    """A trains on 0-1 until 5, then its rank 0 rolls out there; B's rank 2 on GPU 2 hands
    over to A's rank 1 on 2-3 at exactly t=4 (touching intervals are no overlap)."""
    return (alloc("A", "actor_train", -1, (0, 1), 0, 5) + alloc("A", "actor_infer", 0, (0, 1), 5, 9)
            + alloc("B", "actor_infer", 2, (2,), 0, 4) + alloc("A", "actor_infer", 1, (2, 3), 4, 9))


def number(allocations: list[dict[str, Any]], rollouts: list[dict[str, Any]] | None = None) -> int | None:
    try:
        check_run(SPECS, allocations, rollouts or [])
    except InvariantViolation as violation:
        return violation.number
    return None


def test_a_good_allocation_table_passes() -> None:
    assert number(good_allocations()) is None


def test_two_holders_of_one_gpu_at_once_break_1() -> None:
    rows = good_allocations() + alloc("B", "actor_infer", 3, (3,), 8.5, 10)
    assert number(rows) == 1
    assert number(good_allocations() + alloc("B", "actor_infer", 3, (3,), 9, 10)) is None  # touching


def test_an_interval_that_ends_before_it_starts_breaks_1() -> None:
    assert number(alloc("B", "actor_infer", 0, (0,), 5, 4)) == 1
    assert number(alloc("B", "actor_infer", 0, (0,), 5, 5)) is None


def test_a_gang_short_of_its_mapping_breaks_2() -> None:
    assert number(alloc("A", "actor_train", -1, (0,), 0, 5)) == 2


def test_a_rank_off_its_bundle_breaks_2() -> None:
    assert number(alloc("A", "actor_infer", 1, (1, 2), 0, 5)) == 2
    assert number(alloc("A", "actor_infer", 1, (2, 3), 0, 5)) is None


def test_an_allocation_of_a_cluster_nobody_declared_breaks_2() -> None:
    assert number(alloc("A", "critic", -1, (0, 1), 0, 5)) == 2
    assert number(alloc("Z", "actor_train", -1, (0, 1), 0, 5)) == 2


def attempt(tid: int, status: str, t0: float, step: int = 3, version: int = 2, pid: str = "A") -> dict[str, Any]:
    return {"pipeline_id": pid, "adapter": BASE_ADAPTER, "trajectory_id": tid, "step_consumed": step,
            "weight_version": version, "status": status, "t_start": t0, "t_end": t0 + 1}


def test_good_rollout_tables_pass() -> None:
    rows = [attempt(1, "requeued", 0), attempt(1, "completed", 1), attempt(2, "requeued", 0),
            attempt(2, "in_flight", 2), attempt(3, "requeued", 0), attempt(3, "aborted", 1)]
    assert number([], rows) is None


def test_a_trajectory_from_weights_older_than_step_minus_k_breaks_7() -> None:
    # A has k = 1: step 3 may consume version 2, not version 1; B (k = 0) needs version 3.
    assert number([], [attempt(1, "completed", 0, step=3, version=2)]) is None
    assert number([], [attempt(1, "completed", 0, step=3, version=1)]) == 7
    assert number([], [attempt(1, "completed", 0, step=3, version=2, pid="B")]) == 7
    # Only what is consumed counts: an attempt cut short carries no version to check.
    assert number([], [attempt(1, "requeued", 0, version=0), attempt(1, "completed", 1)]) is None


def test_a_trajectory_of_no_pipeline_or_adapter_of_the_run_breaks_7() -> None:
    """A row added to the rollouts table by hand: a violation naming it, not a KeyError."""
    assert number([], [attempt(1, "completed", 0, pid="zzz")]) == 7
    assert number([], [{**attempt(1, "completed", 0), "adapter": "zz"}]) == 7


def test_a_requeued_trajectory_that_never_finishes_breaks_8() -> None:
    assert number([], [attempt(1, "completed", 0), attempt(1, "requeued", 1)]) == 8
    assert number([], [attempt(1, "requeued", 0)]) == 8


def test_a_trajectory_completed_twice_breaks_8() -> None:
    assert number([], [attempt(1, "completed", 0), attempt(1, "completed", 1)]) == 8


def test_an_unknown_status_breaks_8() -> None:
    assert number([], [attempt(1, "lost", 0)]) == 8


def test_check_run_checks_both_tables() -> None:
    with pytest.raises(InvariantViolation, match="invariant 8"):
        check_run(SPECS, good_allocations(), [attempt(1, "requeued", 0)])
    with pytest.raises(InvariantViolation, match="invariant 1"):
        check_run(SPECS, alloc("B", "actor_infer", 0, (0,), 5, 4), [attempt(1, "completed", 0)])
