"""The invariant checker catches broken states and runs (each check must be able to fail)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlix.policy import (
    ClusterRequested,
    DecisionApplied,
    Grant,
    InvariantViolation,
    PipelineAdmitted,
    PipelineRegistered,
    Scheduler,
    Shrink,
    Topology,
)
from rlix.policy.decisions import Expand
from rlix.policy.invariants import InvariantChecker, check_ownership, check_shrink_reasons
from rlix.policy.invariants_split import check_split
from rlix.policy.policies import RlixPolicy
from rlix.policy.rollout import compute_split
from rlix.policy.run_checks import check_allocations, check_rollouts
from rlix.policy.specs import BASE_ADAPTER
from tests.policy.builders import full_finetune

SPECS = {
    "A": full_finetune("A", (0, 1, 2, 3), (0, 1), tp=2, max_staleness=1),
    "B": full_finetune("B", (0, 1, 2, 3), (2, 3)),
}


def rolling_pair() -> Scheduler:
    sched = Scheduler(Topology(1, 4))
    for spec in SPECS.values():
        sched.handle(PipelineRegistered(0, spec))
        sched.handle(PipelineAdmitted(0, spec.pipeline_id))
    for d in sched.handle(ClusterRequested(1, "A", "actor_infer", 6, estimate=10)):
        if isinstance(d, Expand):
            sched.handle(DecisionApplied(1, d.decision_id))
    return sched


def test_double_holder_is_caught() -> None:
    sched = rolling_pair()
    check_ownership(sched)
    rank = sched.pipelines["A"].ranks[0]
    sched.cluster.owner[rank.gpus[0]] = sched.pipelines["B"].ranks[0]
    with pytest.raises(InvariantViolation, match="invariant 1"):
        check_ownership(sched)


def test_rank_off_its_bundle_is_caught() -> None:
    sched = rolling_pair()
    sched.pipelines["A"].ranks[0].gpus = (0, 2)
    with pytest.raises(InvariantViolation, match="invariant 2"):
        check_ownership(sched)


def test_futile_shrink_is_caught() -> None:
    lone = Shrink(7, "A", 0, (0, 1), "preempt")
    with pytest.raises(InvariantViolation, match="invariant 4"):
        check_shrink_reasons([lone], strict=True)
    check_shrink_reasons([lone, Grant(8, "B", "actor_train", 1, (0, 1), (7,))], strict=True)
    check_shrink_reasons([Shrink(9, "A", 0, (0, 1), "rebalance"), Expand(10, "B", 0, (0,), (9,))], strict=True)


class SplitOnly(RlixPolicy):
    """A broken planner: computes the split and then moves nothing."""

    def plan_rollout(self, sched: Scheduler) -> None:
        compute_split(sched, sched.rolling_pipelines())


def test_under_served_pipeline_with_a_free_bundle_is_caught() -> None:
    check_split(rolling_pair())
    sched = Scheduler(Topology(1, 4), SplitOnly())
    sched.handle(PipelineRegistered(0, SPECS["A"]))
    sched.handle(PipelineAdmitted(0, "A"))
    sched.handle(ClusterRequested(1, "A", "actor_infer", 6, estimate=10))
    assert sched.targets == {"A": 4}
    with pytest.raises(InvariantViolation, match="invariant 6"):
        check_split(sched)


def test_lost_holding_is_caught() -> None:
    sched = rolling_pair()
    for d in sched.handle(ClusterRequested(2, "B", "actor_train", 1)):
        if isinstance(d, Grant | Shrink):
            sched.handle(DecisionApplied(2, d.decision_id))
    assert "actor_train" in sched.pipelines["B"].holdings
    checker = InvariantChecker(sched)
    hold = sched.pipelines["B"].holdings.pop("actor_train")  # as if preempted
    sched.cluster.free(hold.gpus, hold)
    with pytest.raises(InvariantViolation, match="invariant 3"):
        checker.after_round(ClusterRequested(3, "A", "critic", 2), [])


def alloc(pid: str, cluster: str, rank: int, gpu: int, t0: float, t1: float) -> dict:
    return {"pipeline_id": pid, "cluster": cluster, "priority": 1, "dp_rank": rank, "gpu": gpu,
            "t_start": t0, "t_end": t1}


def test_allocation_tables() -> None:
    good = [alloc("A", "actor_train", -1, g, 0, 5) for g in (0, 1)] + [
        alloc("B", "actor_infer", 0, 0, 5, 9), alloc("A", "actor_infer", 1, 2, 0, 9), alloc("A", "actor_infer", 1, 3, 0, 9)
    ]
    check_allocations(good, SPECS)
    overlap = good + [alloc("B", "actor_infer", 2, 2, 8, 10)]
    with pytest.raises(InvariantViolation, match="invariant 1"):
        check_allocations(overlap, SPECS)
    partial_gang = [alloc("A", "actor_train", -1, 0, 0, 5)]
    with pytest.raises(InvariantViolation, match="invariant 2"):
        check_allocations(partial_gang, SPECS)


def traj(tid: int, status: str, step: int, version: int, t0: float) -> dict:
    return {"pipeline_id": "A", "adapter": BASE_ADAPTER, "trajectory_id": tid, "step_consumed": step,
            "weight_version": version, "status": status, "t_start": t0, "t_end": t0 + 1}


def test_rollout_tables() -> None:
    check_rollouts([traj(1, "requeued", 3, 2, 0), traj(1, "completed", 3, 2, 1)], SPECS)
    with pytest.raises(InvariantViolation, match="invariant 7"):
        check_rollouts([traj(1, "completed", 3, 1, 0)], SPECS)  # k = 1: needs version >= 2
    with pytest.raises(InvariantViolation, match="invariant 8"):
        check_rollouts([traj(1, "completed", 3, 2, 0), traj(1, "requeued", 3, 2, 1)], SPECS)


def _outcome(rows: list[dict], grouped: bool) -> str:
    try:
        check_rollouts(rows, SPECS, grouped_by_trajectory=grouped)
    except InvariantViolation as error:
        return str(error)
    return "ok"


@settings(max_examples=300, deadline=None)
@given(st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from(["completed", "requeued", "aborted", "in_flight"]),
              st.integers(0, 3), st.integers(0, 3), st.integers(0, 20)),
    max_size=12,
))
def test_rollout_check_streamed_by_trajectory_gives_the_same_verdict(attempts: list) -> None:
    """Checked as a stream (rows grouped by trajectory, one trajectory in memory at a time, for
    10^8-row tables) or all at once in any order: the same pass or fail, and the violation the
    stream reports is what one of the failing trajectories gives checked on its own (the two
    ways may meet the violations in another order)."""
    rows = [traj(tid, status, step, version, float(t0)) for tid, status, step, version, t0 in attempts]
    streamed = _outcome(sorted(rows, key=lambda r: r["trajectory_id"]), grouped=True)
    assert (streamed == "ok") == (_outcome(rows, grouped=False) == "ok")
    alone = {_outcome([r for r in rows if r["trajectory_id"] == tid], grouped=False)
             for tid in {r["trajectory_id"] for r in rows}}
    assert streamed == "ok" or streamed in alone


def test_a_home_placed_again_holds_each_holding_to_the_placement_of_its_time() -> None:
    """A resumed run may place a home given as a size elsewhere: the holdings before keep the
    first home's mapping, those after the second's; one spec for the whole run flags the first."""
    first = full_finetune("A", (0, 1, 2, 3), (0, 1))
    second = full_finetune("A", (0, 1, 2, 3), (2, 3))
    rows = [alloc("A", "actor_train", -1, g, 0, 5) for g in (0, 1)] + [
        alloc("A", "actor_train", -1, g, 12, 15) for g in (2, 3)]

    def spec_at(pipeline_id: str, t_s: float) -> object:
        return first if t_s < 10 else second

    check_allocations(rows, {"A": second}, spec_at)  # type: ignore[arg-type]
    with pytest.raises(InvariantViolation, match="invariant 2"):
        check_allocations(rows, {"A": second})
    swapped = [alloc("A", "actor_train", -1, g, 0, 5) for g in (2, 3)]
    with pytest.raises(InvariantViolation, match="invariant 2"):
        check_allocations(swapped, {"A": second}, spec_at)  # type: ignore[arg-type]
