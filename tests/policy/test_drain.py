"""Draining a rank cut for a grant (`PolicyConfig.max_drain_s`, `Shrink.drain_s`,
rlix.policy.drain): which shrinks drain, for how long, under which policy, and that bad
bounds are refused. Each case is worked out by hand."""

from __future__ import annotations

import pytest

from rlix.policy import (
    ClusterReleased,
    ClusterRequested,
    ClusterSpec,
    PipelineKind,
    PipelineSpec,
    PolicyConfig,
    Topology,
)
from rlix.policy.decisions import Grant, Shrink
from rlix.policy.errors import SpecError
from tests.policy.drive import Driver


def spec(pid: str, home: tuple[int, ...], tp: int = 1) -> PipelineSpec:
    """At home on `home` (its training there), rolling out on all 4 GPUs with staleness 1."""
    clusters = {"actor_infer": ClusterSpec(tp, (0, 1, 2, 3)), "actor_train": ClusterSpec(1, home)}
    return PipelineSpec(pid, PipelineKind.FULL_FINETUNE, clusters, max_staleness=1, home=home)


def preempted(policy: str, config: PolicyConfig, a_home: tuple[int, ...] = (2, 3),
              b_held_s: float | None = 3.0) -> tuple[list[Shrink], Grant]:
    """B (at home on 2-3) trains once for `b_held_s` (None: never before). Then A (TP 2)
    rolls out on all four GPUs and B's training cuts A's rank 1 (GPUs 2-3): on A's own home
    when A's home is stacked on B's (2-3), a loan when A's home is 0-1."""
    d = Driver(Topology(1, 4), config=config, policy=policy)
    d.add(spec("A", a_home, tp=2), spec("B", (2, 3)))
    if b_held_s is not None:
        d.send(ClusterRequested(1.0, "B", "actor_train", 1))
        d.apply_all()
        d.send(ClusterReleased(1.0 + b_held_s, "B", "actor_train"))
    d.send(ClusterRequested(10.0, "A", "actor_infer", 6, estimate=10))
    d.apply_all()
    decisions = d.sched.handle(ClusterRequested(12.0, "B", "actor_train", 1))
    shrinks = [x for x in decisions if isinstance(x, Shrink)]
    grant = next(x for x in decisions if isinstance(x, Grant))
    return shrinks, grant


def test_a_rank_at_home_drains_as_long_as_the_gang_it_delays() -> None:
    """B held its training 3 s: A's rank drains 3 s (within the 4-s bound), and the grant
    waits for it."""
    shrinks, grant = preempted("rlix", PolicyConfig(max_drain_s=4.0))
    assert [(s.dp_rank, s.reason, s.drain_s) for s in shrinks] == [(1, "preempt", 3.0)]
    assert grant.requires == (shrinks[0].decision_id,)


def test_the_bound_caps_the_drain() -> None:
    shrinks, _ = preempted("rlix", PolicyConfig(max_drain_s=2.0))
    assert [s.drain_s for s in shrinks] == [2.0]


def test_by_default_a_rank_at_home_drains_up_to_4_s() -> None:
    shrinks, _ = preempted("rlix", PolicyConfig(), b_held_s=9.0)
    assert [s.drain_s for s in shrinks] == [4.0]


def test_a_loan_is_cut_at_once() -> None:
    """A's home is 0-1: its rank on 2-3 is on B's home, which B wants back."""
    shrinks, _ = preempted("rlix", PolicyConfig(max_drain_s=4.0), a_home=(0, 1))
    assert [(s.dp_rank, s.drain_s) for s in shrinks] == [(1, 0.0)]


def test_a_rank_partly_on_its_home_is_cut_at_once() -> None:
    """A's home is 1-2: its rank on 2-3 is half on B's GPU 3, a loan there, so it does not
    drain (a drain is for a rank wholly on its own home)."""
    shrinks, _ = preempted("rlix", PolicyConfig(max_drain_s=4.0), a_home=(1, 2))
    assert [(s.dp_rank, s.drain_s) for s in shrinks] == [(1, 0.0)]


def test_a_pipeline_does_not_wait_for_its_own_ranks() -> None:
    """A, at home on 2-3, trained there for 3 s once; rolling out again (staleness 1), its
    next training cuts its own rank on 2-3 at once."""
    d = Driver(Topology(1, 4), config=PolicyConfig(max_drain_s=4.0))
    d.add(spec("A", (2, 3), tp=2))
    d.send(ClusterRequested(1.0, "A", "actor_train", 1))
    d.apply_all()
    d.send(ClusterReleased(4.0, "A", "actor_train"))
    d.send(ClusterRequested(10.0, "A", "actor_infer", 6, estimate=10))
    d.apply_all()
    shrinks = [x for x in d.sched.handle(ClusterRequested(12.0, "A", "actor_train", 1)) if isinstance(x, Shrink)]
    assert [(s.dp_rank, s.drain_s) for s in shrinks] == [(1, 0.0)]


def test_a_gang_never_held_before_cuts_at_once() -> None:
    shrinks, _ = preempted("rlix", PolicyConfig(max_drain_s=4.0), b_held_s=None)
    assert [(s.dp_rank, s.drain_s) for s in shrinks] == [(1, 0.0)]


def test_a_zero_bound_cuts_at_once() -> None:
    shrinks, _ = preempted("rlix", PolicyConfig(max_drain_s=0.0))
    assert [s.drain_s for s in shrinks] == [0.0]


def test_the_rlix_model_never_drains() -> None:
    shrinks, _ = preempted("gap-ratio", PolicyConfig(max_drain_s=4.0))
    assert shrinks and all(s.drain_s == 0.0 for s in shrinks)


def test_the_core_measures_holds_as_a_running_mean() -> None:
    """Its init (priority 0) held for 60 s is left out; then held 4 s, then 2 s: each new figure
    weighs one half, (4 + 2) / 2."""
    d = Driver(Topology(1, 4))
    d.add(spec("B", (2, 3)))
    for start, held, priority in ((0.0, 60.0, 0), (100.0, 4.0, 1), (110.0, 2.0, 1)):
        d.send(ClusterRequested(start, "B", "actor_train", priority))
        d.apply_all()
        d.send(ClusterReleased(start + held, "B", "actor_train"))
    assert d.sched.pipelines["B"].hold_s == {"actor_train": 3.0}


@pytest.mark.parametrize("bad", [-1.0, float("inf"), float("nan")])
def test_a_bad_bound_is_refused(bad: float) -> None:
    with pytest.raises(SpecError, match="max_drain_s"):
        PolicyConfig(max_drain_s=bad).validate()
