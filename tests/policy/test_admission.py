"""Serving requests (rlix.policy.admission): when a blocked request is served, what it
reserves, and what it shrinks while it waits. Each case is worked out by hand."""

from __future__ import annotations

from rlix.policy import (
    ClusterReleased,
    ClusterRequested,
    ClusterSpec,
    DecisionApplied,
    DecisionFailed,
    Grant,
    PipelineKind,
    PipelineSpec,
    PolicyConfig,
    RolloutProgressed,
    Shrink,
    Tick,
    Topology,
)
from tests.policy.builders import full_finetune
from tests.policy.drive import Driver, grants

ALL = (0, 1, 2, 3)


def rolling(policy: str = "rlix") -> Driver:
    """A rolls out on all four GPUs (one rank each); B trains on 2-3. Back-off 5 s."""
    d = Driver(Topology(1, 4), config=PolicyConfig(retry_backoff_s=5.0), policy=policy)
    d.add(full_finetune("A", ALL, (0, 1), max_staleness=1), full_finetune("B", ALL, (2, 3)))
    d.send(ClusterRequested(1, "A", "actor_infer", 6, estimate=100))
    d.apply_all()
    return d


def test_the_rlix_model_shrinks_nothing_for_a_request_backing_off() -> None:
    """Under gap-ratio (futile preemption) B's grant fails after A's ranks on 2-3 were cut;
    A's rollout takes 2-3 back (no reservations) while B backs off, and B's request, blocked
    by its back-off only, cuts nothing until the back-off is over (at 8 s): a futile shrink
    is for a request blocked by other holders, not for one that may not be served yet."""
    d = rolling(policy="gap-ratio")
    decisions = d.sched.handle(ClusterRequested(2, "B", "actor_train", 1))
    for shrink in (x for x in decisions if isinstance(x, Shrink)):
        d.sched.handle(DecisionApplied(2, shrink.decision_id))
    (grant,) = [x for x in decisions if isinstance(x, Grant)]
    d.sched.handle(DecisionFailed(3, grant.decision_id, "actor died"))
    d.send(RolloutProgressed(3.5, "A", 100))  # a new cycle: A expands again on 2-3
    d.apply_all()
    assert sorted(r.dp_rank for r in d.sched.pipelines["A"].active.values()) == [0, 1, 2, 3]
    for t in (4.0, 5.0, 7.9):
        assert not any(isinstance(x, Shrink) for x in d.sched.handle(Tick(t)))
    assert {x.dp_rank for x in d.sched.handle(Tick(8.0)) if isinstance(x, Shrink)} == {2, 3}


def gang(pipeline_id: str, **clusters: tuple[int, ...]) -> PipelineSpec:
    """Rollout on GPU 3 only; the named gang clusters on the given GPUs."""
    specs = {"actor_infer": ClusterSpec(1, (3,))}
    specs.update({name: ClusterSpec(1, gpus) for name, gpus in clusters.items()})
    return PipelineSpec(pipeline_id, PipelineKind.FULL_FINETUNE, specs)


def test_a_gpu_reserved_twice_stays_the_older_requests() -> None:
    """X holds GPU 0 and C GPU 2. A (blocked by X) reserves 0-1; B (blocked by A's
    reservation and by C) reserves 1-2, its reservation not blocking C, which B waits on.
    GPU 1 is A's, though, and A does not wait on C: C's critic on GPU 1 waits for A."""
    d = Driver(Topology(1, 4))
    d.add(gang("X", actor_train=(0,)), gang("A", actor_train=(0, 1)), gang("B", actor_train=(1, 2)),
          gang("C", actor_train=(2,), critic=(1,)))
    for pid in ("X", "C"):
        assert grants(d.send(ClusterRequested(1, pid, "actor_train", 1)))
        d.apply_all()
    assert not grants(d.send(ClusterRequested(2, "A", "actor_train", 1)))
    assert not grants(d.send(ClusterRequested(3, "B", "actor_train", 1)))
    assert d.send(ClusterRequested(4, "C", "critic", 2)) == ["hold C/critic: GPU 1 is reserved for A/actor_train"]
    # X releases: A is granted 0-1 and C's critic still waits for GPU 1.
    assert grants(d.send(ClusterReleased(5, "X", "actor_train"))) == ["grant A/actor_train [0, 1]"]


def test_a_reservation_does_not_block_what_its_own_request_waits_on() -> None:
    """Rule 1 where rule 2 does not reach: A (the oldest reserving request, waiting on X)
    reserves GPU 0; B waits on P (P holds GPU 1) and reserves 1-2; P's critic needs GPU 2.
    P is not exempt from A's reservations, but B's may not keep P from what P needs to
    release GPU 1 to B: P's critic is granted."""
    d = Driver(Topology(1, 4))
    d.add(gang("X", actor_train=(0,)), gang("A", actor_train=(0,)), gang("P", actor_train=(1,), critic=(2,)),
          gang("B", actor_train=(1, 2)))
    for pid in ("X", "P"):
        assert grants(d.send(ClusterRequested(1, pid, "actor_train", 1)))
        d.apply_all()
    assert not grants(d.send(ClusterRequested(2, "A", "actor_train", 1)))
    assert not grants(d.send(ClusterRequested(3, "B", "actor_train", 1)))
    assert grants(d.send(ClusterRequested(4, "P", "critic", 2))) == ["grant P/critic [2]"]


def test_a_reservation_does_not_block_what_its_request_waits_on_through_a_chain() -> None:
    """A's training (GPUs 0 and 2) waits on P, which holds GPU 0; P will not release it before
    its critic is granted, and that waits on Q (GPU 1); Q's critic needs GPU 2, which A
    reserves. A waits on Q through P, so its reservation does not keep Q from GPU 2."""
    d = Driver(Topology(1, 4))
    d.add(gang("P", actor_train=(0,), critic=(1,)), gang("Q", actor_train=(1,), critic=(2,)),
          gang("A", actor_train=(0, 2)))
    for pid in ("P", "Q"):
        assert grants(d.send(ClusterRequested(1, pid, "actor_train", 1)))
        d.apply_all()
    assert not grants(d.send(ClusterRequested(2, "P", "critic", 2)))
    assert not grants(d.send(ClusterRequested(3, "A", "actor_train", 1)))
    assert grants(d.send(ClusterRequested(4, "Q", "critic", 2))) == ["grant Q/critic [2]"]
