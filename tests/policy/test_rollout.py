"""The rollout planner's free-bundle search: bitset index of free slots, preference order,
and ranks that may not be used this round."""

from __future__ import annotations

from rlix.policy import (
    ClusterRequested,
    DecisionFailed,
    Expand,
    PipelineAdmitted,
    PipelineRegistered,
    PolicyConfig,
    Scheduler,
    Topology,
)
from rlix.policy.placement import RoundPlanner
from rlix.policy.state import PipelineState
from tests.policy.builders import full_finetune


def register(sched: Scheduler, pid: str, rollout: tuple[int, ...], tp: int = 2) -> PipelineState:
    sched.handle(PipelineRegistered(sched.now, full_finetune(pid, rollout, (7,), tp=tp)))
    sched.handle(PipelineAdmitted(sched.now, pid))
    return sched.pipelines[pid]


def assert_index_exact(sched: Scheduler) -> None:
    cluster = sched.cluster
    assert cluster.free_bits == cluster.bits_of(cluster.free_slot_ids())
    for pipeline in sched.pipelines.values():
        assert pipeline.slot_bits == cluster.bits_of(pipeline.rank_by_slot)
    # Bits follow the bundles' GPU order.
    assert [cluster.slot_gpus[s] for s in cluster.slot_of_bit] == sorted(cluster.slot_gpus)


def test_free_fit_prefers_the_lowest_gpus_not_the_lowest_rank() -> None:
    sched = Scheduler(Topology(1, 8), check_invariants=True)
    pipeline = register(sched, "A", (4, 5, 0, 1, 2, 3))  # rank 0 on (4, 5), rank 1 on (0, 1)
    rank = RoundPlanner(sched).free_fit(pipeline)
    assert rank is not None and (rank.dp_rank, rank.gpus) == (1, (0, 1))


def test_free_fit_walks_up_as_bundles_are_taken() -> None:
    sched = Scheduler(Topology(1, 8), check_invariants=True)
    pipeline = register(sched, "A", (0, 1, 2, 3, 4, 5))
    planner = RoundPlanner(sched)
    taken = []
    while (rank := planner.free_fit(pipeline)) is not None:
        sched.ledger.expand(rank)
        taken.append(rank.gpus)
    assert taken == [(0, 1), (2, 3), (4, 5)]
    assert_index_exact(sched)


def test_a_later_registration_renumbers_every_pipeline() -> None:
    sched = Scheduler(Topology(1, 8), check_invariants=True)
    first = register(sched, "A", (4, 5, 6, 7))
    sched.handle(ClusterRequested(1, "A", "actor_infer", 6, estimate=10.0))  # A expands onto both
    assert first.num_active_gpus == 4
    # B brings bundles with lower GPU ids than any existing slot: every bit moves.
    second = register(sched, "B", (2, 3, 4, 5, 0, 1))
    assert_index_exact(sched)
    planner = RoundPlanner(sched)
    assert planner.free_fit(first) is None  # both of A's bundles are held
    rank = planner.free_fit(second)
    assert rank is not None and rank.gpus == (0, 1)


def test_a_rank_backing_off_is_passed_over_for_the_next_free_bundle() -> None:
    sched = Scheduler(Topology(1, 8), config=PolicyConfig(retry_backoff_s=5.0), check_invariants=True)
    pipeline = register(sched, "A", (0, 1, 2, 3))
    decisions = sched.handle(ClusterRequested(1, "A", "actor_infer", 6, estimate=10.0))
    expands = [d for d in decisions if isinstance(d, Expand)]
    assert [d.gpus for d in expands] == [(0, 1), (2, 3)]
    # The first expansion fails: its rank backs off; the round must not hand it back at once.
    after = sched.handle(DecisionFailed(2, expands[0].decision_id, "no memory"))
    assert not any(isinstance(d, Expand) for d in after)
    planner = RoundPlanner(sched)
    assert planner.free_fit(pipeline) is None
    assert planner.free_fit(pipeline) is None  # the passed-over rank is remembered, not retried
    assert_index_exact(sched)
