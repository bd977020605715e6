"""Settling decisions (rlix.policy.ledger): what a rank still loading when its rollout ends
does once it has loaded. Each case is worked out by hand."""

from __future__ import annotations

from rlix.policy import (
    ClusterReleased,
    ClusterRequested,
    ClusterSpec,
    DecisionApplied,
    Expand,
    PipelineKind,
    PipelineSpec,
    Priority,
    Topology,
)
from rlix.policy.state import RankStatus
from tests.policy.drive import Driver


def test_a_rank_still_loading_when_its_rollout_ends_is_released_once_loaded() -> None:
    """A (no home, so its ranks could stay warm: no one else covers or wants GPUs 0-1) ends its
    rollout while its ranks load. A warm rank is a loaded one kept between rollouts, not a
    load finished for nothing: each is shrunk ("release") as soon as its Expand is applied."""
    d = Driver(Topology(1, 2))
    d.add(PipelineSpec("A", PipelineKind.FULL_FINETUNE, {"actor_infer": ClusterSpec(1, (0, 1))}))
    expands = [x for x in d.sched.handle(ClusterRequested(0, "A", "actor_infer", Priority.ROLLOUT, 100.0))
               if isinstance(x, Expand)]
    assert [x.dp_rank for x in expands] == [0, 1]
    assert d.send(ClusterReleased(1, "A", "actor_infer")) == []
    for expand in expands:
        assert d.send(DecisionApplied(2, expand.decision_id)) == [f"shrink A{expand.dp_rank} release"]
    assert all(r.status is RankStatus.INACTIVE for r in d.sched.pipelines["A"].ranks)
