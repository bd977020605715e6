"""Draining a rank cut for a grant (`PolicyConfig.max_drain_s`, `Shrink.drain_s`): which shrinks
drain, for how long, under which policy, and that bad bounds are refused."""

from __future__ import annotations

import pytest

from rlix.policy import ClusterRequested, PolicyConfig, Topology
from rlix.policy.decisions import Grant, Shrink
from rlix.policy.errors import SpecError
from tests.policy.builders import full_finetune
from tests.policy.drive import Driver


def preempted(policy: str, config: PolicyConfig) -> tuple[list[Shrink], Grant]:
    """A (TP 2) rolls out on all 4 GPUs; B's training on 2-3 cuts A's rank 1."""
    d = Driver(Topology(1, 4), config=config, policy=policy)
    d.add(full_finetune("A", (0, 1, 2, 3), (0, 1), tp=2, max_staleness=1), full_finetune("B", (0, 1, 2, 3), (2, 3)))
    d.send(ClusterRequested(1, "A", "actor_infer", 6, estimate=10))
    d.apply_all()
    decisions = d.sched.handle(ClusterRequested(2, "B", "actor_train", 1))
    shrinks = [x for x in decisions if isinstance(x, Shrink)]
    grant = next(x for x in decisions if isinstance(x, Grant))
    return shrinks, grant


def test_rlix_lets_a_rank_cut_for_a_grant_drain_up_to_the_bound() -> None:
    shrinks, grant = preempted("rlix", PolicyConfig(max_drain_s=4.0))
    assert [(s.dp_rank, s.reason, s.drain_s) for s in shrinks] == [(1, "preempt", 4.0)]
    assert grant.requires == (shrinks[0].decision_id,)  # the grant waits for the drained shrink


def test_by_default_a_rank_is_cut_at_once() -> None:
    shrinks, _ = preempted("rlix", PolicyConfig())
    assert [s.drain_s for s in shrinks] == [0.0]


def test_the_rlix_model_never_drains() -> None:
    shrinks, _ = preempted("gap-ratio", PolicyConfig(max_drain_s=4.0))
    assert shrinks and all(s.drain_s == 0.0 for s in shrinks)


@pytest.mark.parametrize("bad", [-1.0, float("inf"), float("nan")])
def test_a_bad_bound_is_refused(bad: float) -> None:
    with pytest.raises(SpecError, match="max_drain_s"):
        PolicyConfig(max_drain_s=bad).validate()
