"""Two-phase decisions: failures roll back cleanly and idempotently; removal and lost GPUs."""

from __future__ import annotations

import pytest

from rlix.policy import (
    ClusterRequested,
    DecisionApplied,
    DecisionFailed,
    EventError,
    Expand,
    GpuLost,
    GpuRestored,
    Grant,
    PipelineAdmitted,
    PipelineRegistered,
    PipelineRemoved,
    PolicyConfig,
    Revoke,
    Scheduler,
    Shrink,
    Tick,
    Topology,
)
from rlix.policy.state import RankStatus
from tests.policy.builders import full_finetune
from tests.policy.digest import digest

ALL = tuple(range(4))


def setup(*pipelines: tuple[str, tuple[int, ...], tuple[int, ...]]) -> Scheduler:
    sched = Scheduler(Topology(1, 4), config=PolicyConfig(retry_backoff_s=5.0), check_invariants=True)
    for pid, rollout, train in pipelines:
        sched.handle(PipelineRegistered(0, full_finetune(pid, rollout, train)))
        sched.handle(PipelineAdmitted(0, pid))
    return sched


def apply_all(sched: Scheduler, decisions: list) -> None:
    for d in decisions:
        if isinstance(d, Grant | Expand | Shrink):
            apply_all(sched, sched.handle(DecisionApplied(sched.now, d.decision_id)))


def test_failed_grant_is_requeued_at_its_place_and_retried_after_backoff() -> None:
    sched = setup(("A", ALL, (0, 1)), ("B", ALL, (0, 1)))
    (grant_a,) = [d for d in sched.handle(ClusterRequested(1, "A", "actor_train", 1)) if isinstance(d, Grant)]
    sched.handle(ClusterRequested(2, "B", "actor_train", 1))  # waits behind A's grant
    decisions = sched.handle(DecisionFailed(3, grant_a.decision_id, "actor died"))
    # A is back in the queue ahead of B (same priority, older); B must not overtake it while
    # A backs off: the GPUs stay reserved for A.
    assert [(r.pipeline_id, r.seq) for r in sched.queue][0][0] == "A"
    assert not any(isinstance(d, Grant) for d in decisions)
    assert not any(isinstance(d, Grant) for d in sched.handle(Tick(7.9)))
    (retry,) = [d for d in sched.handle(Tick(8.0)) if isinstance(d, Grant)]
    assert retry.pipeline_id == "A" and retry.gpus == (0, 1)
    # A second failure report for the first grant changes nothing.
    before = digest(sched)
    sched.handle(DecisionFailed(8.0, grant_a.decision_id))
    assert digest(sched) == before


def test_failed_shrink_fails_the_grant_that_required_it() -> None:
    sched = setup(("A", ALL, (0, 1)), ("B", ALL, (2, 3)))
    apply_all(sched, sched.handle(ClusterRequested(1, "A", "actor_infer", 6, estimate=10)))
    decisions = sched.handle(ClusterRequested(2, "B", "actor_train", 1))
    shrinks = [d for d in decisions if isinstance(d, Shrink)]
    (grant,) = [d for d in decisions if isinstance(d, Grant)]
    assert [s.dp_rank for s in shrinks] == [2, 3] and set(grant.requires) == {s.decision_id for s in shrinks}
    sched.handle(DecisionFailed(3, shrinks[0].decision_id, "rank did not stop"))
    ranks = sched.pipelines["A"].ranks
    assert ranks[2].status is RankStatus.ACTIVE  # rolled back
    assert "actor_train" not in sched.pipelines["B"].holdings  # the grant was failed with it
    assert sched.queue and sched.queue[0].pipeline_id == "B"
    # The driver now reports the dependent grant failed, and the other shrink applied: no-ops
    # for the grant, and the applied shrink stays done.
    sched.handle(DecisionFailed(3, grant.decision_id))
    sched.handle(DecisionApplied(3, shrinks[1].decision_id))
    # Reports for a rolled-back decision are ignored.
    before = digest(sched)
    sched.handle(DecisionApplied(3, grant.decision_id))
    assert digest(sched)["pipelines"] == before["pipelines"]


def test_failed_expand_is_not_retried_before_backoff() -> None:
    sched = setup(("A", (0,), (1,)))
    (expand,) = [d for d in sched.handle(ClusterRequested(1, "A", "actor_infer", 6)) if isinstance(d, Expand)]
    assert not any(isinstance(d, Expand) for d in sched.handle(DecisionFailed(2, expand.decision_id)))
    assert not any(isinstance(d, Expand) for d in sched.handle(Tick(6.9)))
    assert any(isinstance(d, Expand) for d in sched.handle(Tick(7.0)))


def test_unknown_decision_id_is_an_error() -> None:
    sched = setup(("A", ALL, (0,)))
    with pytest.raises(EventError, match="decision_id=99"):
        sched.handle(DecisionApplied(1, 99))


def test_removing_a_pipeline_frees_its_gpus_and_nothing_else() -> None:
    sched = setup(("A", ALL, (0, 1)), ("B", ALL, (2, 3)))
    apply_all(sched, sched.handle(ClusterRequested(1, "B", "actor_train", 1)))
    in_flight = sched.handle(ClusterRequested(2, "A", "actor_infer", 6, estimate=5))
    assert {d.dp_rank for d in in_flight if isinstance(d, Expand)} == {0, 1}
    sched.handle(PipelineRemoved(3, "A", failed=True))
    assert sched.cluster.owner[0] is None and sched.cluster.owner[1] is None
    assert set(sched.pipelines["B"].holdings) == {"actor_train"}
    for d in in_flight:  # late reports for the removed pipeline are ignored
        sched.handle(DecisionApplied(4, d.decision_id))
    assert sched.cluster.num_free == 2


def test_lost_gpu_revokes_training_and_requeues_it_until_the_gpu_is_back() -> None:
    sched = setup(("A", (2, 3), (0, 1)))
    apply_all(sched, sched.handle(ClusterRequested(1, "A", "actor_train", 1)))
    decisions = sched.handle(GpuLost(2, 1))
    assert [type(d) for d in decisions if not type(d).__name__ == "Hold"] == [Revoke]
    assert sched.queue[0].cluster == "actor_train"
    assert not any(isinstance(d, Grant) for d in sched.handle(Tick(20)))
    (grant,) = [d for d in sched.handle(GpuRestored(21, 1)) if isinstance(d, Grant)]
    assert grant.gpus == (0, 1)
