"""A cluster manager of its own driving the core from the README and DESIGN.md alone.

Each test is a mistake such a driver plausibly makes, or a contract it relies on, that the
core once got wrong: a bad argument must be a `SpecError` / `EventError` naming the field, and
nothing a driver hands in may change the core's state behind its back.
"""

from __future__ import annotations

from typing import Any

import pytest

from rlix.policy import (
    POLICIES,
    ClusterRequested,
    ClusterSpec,
    DecisionFailed,
    DecisionsApplied,
    EventError,
    Expand,
    Grant,
    PipelineAdmitted,
    PipelineKind,
    PipelineRegistered,
    PipelineRemoved,
    PipelineSpec,
    Place,
    Priority,
    Scheduler,
    SpecError,
    Topology,
)


@pytest.mark.parametrize("topology", [None, {"num_nodes": 1, "gpus_per_node": 8}, (1, 8)])
def test_scheduler_names_a_topology_that_is_not_one(topology: object) -> None:
    # It was an AttributeError ('dict' object has no attribute 'validate'), while a bad policy
    # or config was a SpecError naming its argument.
    with pytest.raises(SpecError) as caught:
        Scheduler(topology)  # type: ignore[arg-type]
    assert caught.value.field == "topology"
    assert "Topology" in caught.value.problem


def test_a_registered_spec_keeps_its_clusters_when_the_driver_reuses_the_dict() -> None:
    # A driver building its specs in a loop edits one clusters dict for the next pipeline.
    # The spec shared the dict, so A's registered spec moved to B's GPUs while A's ranks
    # stayed on its own: invariant 2 broke on the next request, and without the checker A's
    # gangs were granted on B's GPUs.
    sched = Scheduler(Topology(1, 8), check_invariants=True)
    clusters = {"actor_infer": ClusterSpec(1, (0, 1, 2, 3)), "actor_train": ClusterSpec(1, (0, 1))}
    staleness = {"a0": 0, "a1": 1}
    spec_a = PipelineSpec("A", PipelineKind.MULTI_LORA, clusters, ("a0", "a1"), staleness)
    sched.handle(PipelineRegistered(0.0, spec_a))
    clusters["actor_infer"] = ClusterSpec(1, (4, 5, 6, 7))
    clusters["actor_train"] = ClusterSpec(1, (4, 5))
    staleness["a1"] = 3
    sched.handle(PipelineRegistered(0.0, PipelineSpec("B", PipelineKind.MULTI_LORA, clusters, ("a0", "a1"), staleness)))
    assert spec_a.clusters["actor_train"].mapping == (0, 1)
    assert spec_a.staleness_of("a1") == 1
    sched.handle(PipelineAdmitted(0.0, "A"))
    expands = sched.handle(ClusterRequested(1.0, "A", "actor_infer", Priority.ROLLOUT, estimate=10))
    assert sorted(g for d in expands if isinstance(d, Expand) for g in d.gpus) == [0, 1, 2, 3]
    sched.handle(DecisionsApplied(1.0, tuple(d.decision_id for d in expands if isinstance(d, Expand))))
    grants = sched.handle(ClusterRequested(2.0, "A", "actor_train", Priority.ACTOR_TRAIN))
    assert [d.gpus for d in grants if isinstance(d, Grant)] == [(0, 1)]


def _sized(size: int, tp: int, scope: str) -> PipelineSpec:
    clusters = {"actor_infer": ClusterSpec(tp, (), scope), "actor_train": ClusterSpec(1, (), "home")}
    return PipelineSpec("A", PipelineKind.FULL_FINETUNE, clusters, home_size=size)


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize(("size", "tp", "scope"), [(3, 2, "home"), (1, 2, "pool"), (6, 4, "home"), (8, 8, "pool")])
def test_a_sized_home_no_pool_can_hold_is_refused_at_registration(policy: str, size: int, tp: int, scope: str) -> None:
    # A home is placed in aligned TP chunks inside one node. Such a size was registered, and
    # the pipeline's init was held "waiting for its turn" for ever, even alone on the pool.
    sched = Scheduler(Topology(2, 4), policy=policy, check_invariants=True)
    with pytest.raises(SpecError) as caught:
        sched.handle(PipelineRegistered(0.0, _sized(size, tp, scope)))
    assert caught.value.field == "A.home_size"
    assert "whole TP bundles" in caught.value.problem
    assert not sched.pipelines


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize(("size", "tp", "scope"), [(4, 2, "home"), (2, 2, "pool"), (8, 4, "home"), (1, 1, "home")])
def test_a_placeable_sized_home_is_placed_and_granted(policy: str, size: int, tp: int, scope: str) -> None:
    sched = Scheduler(Topology(2, 4), policy=policy, check_invariants=True)
    spec = _sized(size, tp, scope)
    spec = PipelineSpec(spec.pipeline_id, spec.kind, spec.clusters, home_size=size, runtime_estimate_s=60.0)
    decisions = sched.handle(PipelineRegistered(0.0, spec))
    decisions += sched.handle(PipelineAdmitted(0.0, "A"))
    decisions += sched.handle(ClusterRequested(1.0, "A", "actor_train", Priority.INIT))
    assert [len(d.home) for d in decisions if isinstance(d, Place)] == [size]
    assert [len(d.gpus) for d in decisions if isinstance(d, Grant)] == [size]


def test_every_decision_a_driver_handles_is_exported() -> None:
    # A driver of sized homes must act on Place (its clusters' mappings from then on); it
    # was the one decision `from rlix.policy import ...` could not name.
    import rlix.policy
    from rlix.policy import decisions

    kinds = {name for name, value in vars(decisions).items()
             if isinstance(value, type) and issubclass(value, decisions.Decision)}
    assert kinds <= set(rlix.policy.__all__)
    assert all(getattr(rlix.policy, name) is getattr(decisions, name) for name in kinds)


def test_a_first_event_before_the_clocks_start_is_named_so() -> None:
    # It read "goes backwards (last event was at 0.0)" although no event had come.
    sched = Scheduler(Topology(1, 2))
    with pytest.raises(EventError) as caught:
        sched.handle(PipelineRegistered(-1.0, _one_gpu_spec("A")))
    assert caught.value.field == "now" and "starts at 0" in caught.value.problem
    assert not sched.pipelines


@pytest.mark.parametrize("event", [
    lambda decision_id: PipelineRemoved(2.0, "A", failed="yes"),
    lambda decision_id: DecisionFailed(2.0, decision_id, reason=None),
])
def test_the_fields_the_run_record_keeps_are_typed(event: Any) -> None:
    # The core never reads `failed` or `reason`, but the run record keeps both (a job that
    # failed, a failure's text), so a wrong type is named before anything changes.
    sched = Scheduler(Topology(1, 2), check_invariants=True)
    sched.handle(PipelineRegistered(0.0, _one_gpu_spec("A")))
    sched.handle(PipelineAdmitted(0.0, "A"))
    (grant,) = sched.handle(ClusterRequested(1.0, "A", "actor_train", Priority.ACTOR_TRAIN))
    with pytest.raises(EventError):
        sched.handle(event(grant.decision_id))
    assert "A" in sched.pipelines and grant.decision_id in sched.ledger.inflight


def _one_gpu_spec(pipeline_id: str) -> PipelineSpec:
    return PipelineSpec(pipeline_id, PipelineKind.FULL_FINETUNE,
                        {"actor_infer": ClusterSpec(1, (0,)), "actor_train": ClusterSpec(1, (0,))})
