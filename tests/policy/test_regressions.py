"""Regression tests for defects found in the `rlix` policy and the core.

Each test rebuilds one reported situation and asserts what the contract asks for. The
invariant checker runs after every event (`check_invariants=True`).
"""

from __future__ import annotations

import math

import pytest

from rlix.policy import (
    MAX_WORK,
    POLICIES,
    ClusterReleased,
    ClusterReleasedAndRequested,
    ClusterRequested,
    ClusterSpec,
    DecisionApplied,
    DecisionFailed,
    Event,
    EventError,
    GpuLost,
    Grant,
    InvariantViolation,
    PipelineAdmitted,
    PipelineKind,
    PipelineRegistered,
    PipelineRemoved,
    PipelineSpec,
    PolicyConfig,
    PolicyError,
    RolloutProgressed,
    Scheduler,
    Shrink,
    SpecError,
    Tick,
    Topology,
)
from rlix.policy.decisions import describe
from rlix.policy.invariants_split import check_split
from tests.policy.builders import full_finetune
from tests.policy.digest import digest
from tests.policy.drive import Driver, grants, rollout_only


def gang(pipeline_id: str, **clusters: tuple[int, ...]) -> PipelineSpec:
    """Rollout on GPU 3 only; the named gang clusters on the given GPUs."""
    specs = {"actor_infer": ClusterSpec(1, (3,))}
    specs.update({name: ClusterSpec(1, gpus) for name, gpus in clusters.items()})
    return PipelineSpec(pipeline_id, PipelineKind.FULL_FINETUNE, specs)


# --- 1. reservations and hold-and-wait --------------------------------------------------------


def test_a_hold_and_wait_chain_is_not_deadlocked_by_reservations() -> None:
    """B holds GPU 0 and asks for GPU 2; A (blocked by B) reserved {0, 1}, C (blocked by A's
    reservation) wants {1, 2}. B's critic must be granted: A waits on B."""
    d = Driver(Topology(1, 4))
    d.add(gang("A", actor_train=(0, 1)), gang("B", actor_train=(0,), critic=(2,)), gang("C", actor_train=(1, 2)))
    d.send(ClusterRequested(0, "B", "actor_train", 1))
    d.apply_all()
    assert d.send(ClusterRequested(0, "A", "actor_train", 1)) == ["hold A/actor_train: GPU 0 is held by B/actor_train"]
    assert d.send(ClusterRequested(0, "C", "actor_train", 1)) == ["hold C/actor_train: GPU 1 is reserved for A/actor_train"]
    assert d.send(ClusterRequested(0, "B", "critic", 2)) == ["grant B/critic [2]"]
    d.apply_all()
    # B finishes and releases both; A is served before C (it is older), then C.
    d.send(ClusterReleased(1, "B", "critic"))
    assert grants(d.send(ClusterReleased(1, "B", "actor_train"))) == ["grant A/actor_train [0, 1]"]
    d.apply_all()
    assert grants(d.send(ClusterReleased(2, "A", "actor_train"))) == ["grant C/actor_train [1, 2]"]


def test_two_reservations_do_not_block_each_others_chains() -> None:
    """A waits on P, D waits on Q; P's next request needs a GPU D reserved and Q's a GPU A
    reserved. Blocked only by holders, both A and D reserve (so "do not reserve when blocked
    by a reservation" would deadlock); the oldest's chain (P) is exempt from every reservation."""
    d = Driver(Topology(1, 8))
    d.add(
        gang("P", actor_train=(0,), critic=(4,)),
        gang("Q", actor_train=(2,), critic=(6,)),
        gang("A", actor_train=(0, 1, 6)),
        gang("D", actor_train=(2, 4)),
    )
    d.send(ClusterRequested(0, "P", "actor_train", 1))
    d.send(ClusterRequested(0, "Q", "actor_train", 1))
    d.apply_all()
    d.send(ClusterRequested(1, "A", "actor_train", 1))  # waits on P, reserves 0, 1, 6
    d.send(ClusterRequested(1, "D", "actor_train", 1))  # waits on Q, reserves 2, 4
    assert d.send(ClusterRequested(1, "Q", "critic", 2)) == ["hold Q/critic: GPU 6 is reserved for A/actor_train"]
    assert grants(d.send(ClusterRequested(1, "P", "critic", 2))) == ["grant P/critic [4]"]
    d.apply_all()
    d.send(ClusterReleased(2, "P", "critic"))
    assert grants(d.send(ClusterReleased(2, "P", "actor_train"))) == ["grant A/actor_train [0, 1, 6]"]
    d.apply_all()
    assert grants(d.send(ClusterReleased(3, "A", "actor_train"))) == ["grant Q/critic [6]"]
    d.apply_all()
    d.send(ClusterReleased(4, "Q", "critic"))
    assert grants(d.send(ClusterReleased(4, "Q", "actor_train"))) == ["grant D/actor_train [2, 4]"]


# --- 2. extreme numbers ---------------------------------------------------------------------------


@pytest.mark.parametrize("estimate", [1e308, 1e19, math.inf, -1.0, True])
def test_out_of_range_work_is_rejected_and_changes_nothing(estimate: float) -> None:
    d = Driver(Topology(1, 8))
    d.add(rollout_only("A", 4), rollout_only("B", 4))
    d.send(ClusterRequested(0, "A", "actor_infer", 6, 1.0))
    before = digest(d.sched)
    with pytest.raises(EventError) as info:
        d.sched.handle(ClusterRequested(0, "B", "actor_infer", 6, estimate))
    assert info.value.field == "estimate"
    assert digest(d.sched) == before
    with pytest.raises(EventError, match="remaining"):
        d.sched.handle(RolloutProgressed(0, "A", estimate))
    assert digest(d.sched) == before
    d.send(Tick(1))  # the core is not wedged


@pytest.mark.parametrize(
    ("work_a", "work_b", "weight"),
    [(1e18, 1.0, 2.0), (1e18, 1e18, 1e308), (1e-310, 1e-310, 1.0), (5e-324, 1.0, 1.0), (1e18, 5e-324, 1e-300)],
)
def test_extreme_but_valid_numbers_give_a_sane_split(work_a: float, work_b: float, weight: float) -> None:
    d = Driver(Topology(1, 8))
    d.add(rollout_only("A", 4, weight=weight), rollout_only("B", 4))
    d.send(ClusterRequested(0, "A", "actor_infer", 6, 10.0))
    d.send(ClusterRequested(0, "B", "actor_infer", 6, 10.0))
    d.apply_all()
    d.send(RolloutProgressed(1, "A", work_a))
    d.send(RolloutProgressed(1, "B", work_b))
    d.apply_all()
    assert d.sched.targets == {"A": 4, "B": 4}  # both fit one bundle: both get one
    assert all(math.isfinite(x) for x in d.sched.ideal.values())
    assert d.held("A") == 4 and d.held("B") == 4


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_no_policy_raises_on_extreme_but_valid_numbers(policy: str) -> None:
    d = Driver(Topology(1, 8), policy=policy)
    d.add(rollout_only("A", 4, weight=1e308), rollout_only("B", 2, weight=5e-324), rollout_only("C", 1))
    for pid, work in (("A", MAX_WORK), ("B", 5e-324), ("C", 1e-310)):
        d.send(ClusterRequested(0, pid, "actor_infer", 6, work))
    for t in range(1, 4):
        d.apply_all()
        for pid, work in (("A", 5e-324), ("B", MAX_WORK), ("C", MAX_WORK)):
            d.send(RolloutProgressed(t, pid, work))
    assert all(math.isfinite(x) for x in d.sched.ideal.values())


# --- 3. a rebalance never takes a donor below its target ---------------------------------------


@pytest.mark.parametrize("interval_s", [0.0, 30.0])
def test_a_tp4_newcomer_gets_its_bundle_without_overdrawing_a_donor(interval_s: float) -> None:
    """A (TP 2, weight 2) holds 4-7, B (TP 2) 0-3; C (TP 4) arrives: targets A 2, B 2, C 4.
    Freeing a TP-4 bundle takes two ranks of one donor that is one bundle above target; that
    donor is made whole on a bundle of the other donor in the same round."""
    d = Driver(Topology(1, 8), PolicyConfig(min_rebalance_interval_s=interval_s))
    d.add(rollout_only("A", 2, weight=2.0), rollout_only("B", 2))
    d.send(ClusterRequested(0, "A", "actor_infer", 6, 20.0))
    d.send(ClusterRequested(0, "B", "actor_infer", 6, 50.0))
    d.sched.handle(Tick(1))
    d.apply_all()
    assert (d.held("A"), d.held("B")) == (4, 4)
    d.add(rollout_only("C", 4))
    lines = d.send(ClusterRequested(1, "C", "actor_infer", 6, 100.0))
    assert d.sched.targets == {"A": 2, "B": 2, "C": 4}
    assert (d.held("A"), d.held("B"), d.held("C")) == (2, 2, 4)
    assert sum(line.endswith("rebalance") for line in lines) == 3  # two for C, one to make B whole


# --- 4. a failed shrink backs off ----------------------------------------------------------------


def test_a_failed_release_shrink_is_not_retried_before_the_backoff() -> None:
    # Without warm ranks: nothing else wants GPU 1, so the rank there would stay loaded.
    d = Driver(Topology(1, 2), PolicyConfig(retry_backoff_s=60.0, keep_warm=False))
    d.add(full_finetune("A", (0, 1), (0,)))
    d.send(ClusterRequested(0, "A", "actor_infer", 6, 10))
    d.apply_all()
    decisions = d.sched.handle(ClusterReleased(0, "A", "actor_infer"))
    shrinks = [x for x in decisions if isinstance(x, Shrink)]
    assert len(shrinks) == 2
    for shrink in shrinks:
        assert not any(isinstance(x, Shrink) for x in d.sched.handle(DecisionFailed(0, shrink.decision_id, "hung")))
    assert not any(isinstance(x, Shrink) for x in d.sched.handle(Tick(59.9)))
    retried = [x for x in d.sched.handle(Tick(60.0)) if isinstance(x, Shrink)]
    assert [(x.dp_rank, x.reason) for x in retried] == [(0, "release"), (1, "release")]


def test_a_failed_rebalance_shrink_is_not_retried_before_the_backoff() -> None:
    """A (TP 4) holds three bundles, 0-11; B and C (TP 4, only 0-3) come with more work: a
    bundle each in the split, but only one fits. B's move onto A's rank 0 fails with its
    shrink; C must not shrink that rank again before the back-off."""
    d = Driver(Topology(2, 8), PolicyConfig(retry_backoff_s=60.0, min_rebalance_interval_s=0.0))
    d.add(
        full_finetune("A", tuple(range(12)), (15,), tp=4),
        full_finetune("B", (0, 1, 2, 3), (15,), tp=4),
        full_finetune("C", (0, 1, 2, 3), (15,), tp=4),
    )
    expands = d.sched.handle(ClusterRequested(0, "A", "actor_infer", 6, 10))
    d.send(ClusterRequested(0, "B", "actor_infer", 6, 100))  # A's ranks are still loading
    d.send(ClusterRequested(0, "C", "actor_infer", 6, 90))
    assert d.sched.targets == {"A": 4, "B": 4, "C": 4}
    shrinks = [x for e in expands for x in d.sched.handle(DecisionApplied(0, e.decision_id)) if isinstance(x, Shrink)]
    (shrink,) = shrinks  # for B, the neediest by admission order; C's only bundle is the same
    assert (shrink.pipeline_id, shrink.dp_rank) == ("A", 0)
    assert not any(isinstance(x, Shrink) for x in d.sched.handle(DecisionFailed(0, shrink.decision_id, "hung")))
    assert not any(isinstance(x, Shrink) for x in d.sched.handle(Tick(59.0)))
    retried = [x for x in d.sched.handle(Tick(60.0)) if isinstance(x, Shrink)]
    assert [(x.pipeline_id, x.dp_rank, x.reason) for x in retried] == [("A", 0, "rebalance")]


# --- 5. rollout requested again before its Expand was applied ----------------------------------


def test_rolling_again_before_the_expand_is_applied_keeps_the_rank() -> None:
    d = Driver(Topology(1, 2))
    d.add(full_finetune("A", (0, 1), (0,)))
    expands = d.sched.handle(ClusterRequested(0, "A", "actor_infer", 6, 10))
    d.send(ClusterReleased(0, "A", "actor_infer"))
    d.send(ClusterRequested(0, "A", "actor_infer", 6, 10))
    for expand in expands:
        assert d.send(DecisionApplied(0, expand.decision_id)) == []
    assert d.held("A") == 2


# --- 6. a lost GPU does not idle the pool --------------------------------------------------------


def test_a_request_waiting_for_a_lost_gpu_reserves_nothing() -> None:
    d = Driver(Topology(1, 8))
    d.add(full_finetune("A", tuple(range(8)), tuple(range(8))), full_finetune("B", tuple(range(8)), (0, 1)))
    d.send(GpuLost(0, 7))
    assert d.send(ClusterRequested(0, "A", "actor_train", 1)) == ["hold A/actor_train: GPU 7 is lost"]
    lines = d.send(ClusterRequested(0, "B", "actor_infer", 6, 100.0))
    assert lines == [f"expand B{r}" for r in range(7)]
    d.apply_all()
    lines = d.send(ClusterReleasedAndRequested(1, "B", "actor_infer", "actor_train", 3))
    assert "grant B/actor_train [0, 1]" in lines


# --- 7. reports out of order -----------------------------------------------------------------------


def test_a_grant_reported_applied_before_its_shrinks_is_rejected() -> None:
    d = Driver(Topology(1, 4))
    d.add(full_finetune("A", (0, 1, 2, 3), (0, 1)), full_finetune("B", (2, 3), (0, 1)))
    d.send(ClusterRequested(0, "A", "actor_infer", 6, 10))
    d.apply_all()
    decisions = d.sched.handle(ClusterRequested(0, "B", "actor_train", 1))
    shrinks = [x for x in decisions if isinstance(x, Shrink)]
    (grant,) = [x for x in decisions if isinstance(x, Grant)]
    before = digest(d.sched)
    with pytest.raises(EventError, match="decision_id") as info:
        d.sched.handle(DecisionApplied(0, grant.decision_id))
    assert info.value.value == grant.decision_id
    assert digest(d.sched) == before
    # The shrink then fails: the grant is rolled back with it, cleanly.
    d.sched.handle(DecisionFailed(0, shrinks[0].decision_id))
    assert "actor_train" not in d.sched.pipelines["B"].holdings
    assert d.held("A") == 3  # the other shrink is still in flight
    d.sched.handle(DecisionApplied(0, shrinks[1].decision_id))
    d.sched.handle(Tick(1))


# --- 8. input validation ---------------------------------------------------------------------------


def test_a_list_mapping_is_accepted_as_a_tuple() -> None:
    sched = Scheduler(Topology(1, 4), check_invariants=True)
    spec = PipelineSpec(  # as YAML or JSON give it: lists, the kind as a string
        "A", "full_finetune",  # type: ignore[arg-type]
        {"actor_infer": ClusterSpec(1, [0, 1]), "actor_train": ClusterSpec(1, [2])},  # type: ignore[arg-type]
    )
    assert spec.rollout.mapping == (0, 1) and spec.kind is PipelineKind.FULL_FINETUNE
    sched.handle(PipelineRegistered(0, spec))
    sched.handle(PipelineAdmitted(0, "A"))
    assert len(sched.handle(ClusterRequested(0, "A", "actor_infer", 6, 1.0))) == 2


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (PolicyConfig(retry_backoff_s=math.nan), "config.retry_backoff_s"),
        (PolicyConfig(retry_backoff_s=-5), "config.retry_backoff_s"),
        (PolicyConfig(min_rebalance_interval_s=math.inf), "config.min_rebalance_interval_s"),
        (PolicyConfig(rebalance_margin_bundles=-3), "config.rebalance_margin_bundles"),
        (PolicyConfig(retry_backoff_s=True), "config.retry_backoff_s"),
    ],
)
def test_a_bad_policy_config_is_a_spec_error(config: PolicyConfig, field: str) -> None:
    with pytest.raises(SpecError) as info:
        Scheduler(Topology(1, 4), config=config)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("adapters", "value"), [(("",), ""), ((1, 2), 1), (("*", "a1"), "*"), ("a0", "a0")]
)
def test_bad_adapter_names_are_spec_errors(adapters: tuple[str, ...], value: object) -> None:
    spec = PipelineSpec("L", PipelineKind.MULTI_LORA, {"actor_infer": ClusterSpec(1, (0,))}, adapters)
    with pytest.raises(SpecError) as info:
        spec.validate(Topology(1, 4))
    assert info.value.field == "L.adapters" and info.value.value == value


def bad_events() -> list[tuple[Event, str]]:
    return [
        (Tick(math.inf), "now"),
        (Tick(True), "now"),  # type: ignore[arg-type]
        (ClusterRequested(0, ["A"], "actor_train", 1), "pipeline_id"),  # type: ignore[arg-type]
        (ClusterRequested(0, "A", ["actor_train"], 1), "cluster"),  # type: ignore[arg-type]
        (ClusterRequested(0, "A", "actor_infer", 6, True), "estimate"),
        (ClusterRequested(0, "A", "actor_train", True), "priority"),  # type: ignore[arg-type]
        (DecisionApplied(0, True), "decision_id"),  # type: ignore[arg-type]
        (RolloutProgressed(0, "A", 1.0, adapter=["a"]), "adapter"),  # type: ignore[arg-type]
        (PipelineRegistered(0, "A"), "spec"),  # type: ignore[arg-type]
        (PipelineRemoved(0, {"A"}), "pipeline_id"),  # type: ignore[arg-type]
    ]


@pytest.mark.parametrize(("event", "field"), bad_events())
def test_bad_event_fields_are_typed_errors_and_change_nothing(event: Event, field: str) -> None:
    sched = Scheduler(Topology(1, 4), check_invariants=True)
    sched.handle(PipelineRegistered(0, full_finetune("A", (0, 1), (2,))))
    sched.handle(PipelineAdmitted(0, "A"))
    sched.handle(ClusterRequested(0, "A", "actor_infer", 6, 5.0))
    before = digest(sched)
    with pytest.raises(PolicyError) as info:
        sched.handle(event)
    assert getattr(info.value, "field", None) == field
    assert digest(sched) == before


# --- 9. a pipeline id reused with another mapping --------------------------------------------------


def test_a_reregistered_pipeline_gets_the_budget_of_its_new_mapping() -> None:
    d = Driver(Topology(2, 8))
    d.add(full_finetune("A", tuple(range(4)), (15,)))
    d.send(ClusterRequested(0, "A", "actor_infer", 6, 100))
    d.apply_all()
    d.send(ClusterReleased(0, "A", "actor_infer"))
    d.apply_all()
    d.send(PipelineRemoved(0, "A", failed=True))
    d.add(full_finetune("A", tuple(range(16)), (15,)))
    d.send(ClusterRequested(0, "A", "actor_infer", 6, 100))
    assert d.sched.targets == {"A": 16}


def test_the_checker_computes_the_budget_itself() -> None:
    """A planner with a stale budget (a cached union bigger than the rollers' mappings) is
    caught: the checker does not ask the planner's code what the budget is."""
    sched = Scheduler(Topology(2, 8))
    for pid in "AB":
        sched.handle(PipelineRegistered(0, full_finetune(pid, tuple(range(4)), (15,))))
        sched.handle(PipelineAdmitted(0, pid))
        sched.handle(ClusterRequested(0, pid, "actor_infer", 6, 100))
    check_split(sched)
    key = frozenset(p.registered_seq for p in sched.pipelines.values())
    sched.cluster.union_cache = (key, frozenset(range(8)))  # as if the mappings covered 8 GPUs
    sched.handle(RolloutProgressed(1, "A", 90))
    assert sched.targets == {"A": 4, "B": 4}
    with pytest.raises(InvariantViolation, match="invariant 6"):
        check_split(sched)


# --- 10. checker with a zero back-off --------------------------------------------------------------


def test_a_grant_failed_and_granted_again_in_one_round_is_no_violation() -> None:
    d = Driver(Topology(1, 2), PolicyConfig(retry_backoff_s=0.0))
    d.add(full_finetune("A", (0, 1), (0,)), full_finetune("B", (1,), (0,)))
    d.send(ClusterRequested(0, "A", "actor_infer", 6, 10))
    d.apply_all()
    decisions = d.sched.handle(ClusterRequested(0, "B", "actor_train", 1))
    (shrink,) = [x for x in decisions if isinstance(x, Shrink)]
    old = d.sched.pipelines["B"].holdings["actor_train"]  # alive, so its id() cannot be reused
    lines = [describe(x) for x in d.sched.handle(DecisionFailed(0, shrink.decision_id))]
    assert d.sched.pipelines["B"].holdings["actor_train"] is not old
    assert lines == ["shrink A0 preempt", "grant B/actor_train [0]"]


# --- 11. a gang over the requester's own holding -------------------------------------------------


def test_a_gang_over_its_own_holding_is_refused() -> None:
    """Holding actor_train on GPUs 0-1 and asking for a critic on GPUs 1-2 could only be granted
    after a release that the pipeline, waiting for the grant, never sends: the request is
    refused and nothing changes. Released in the same event, the handoff is fine."""
    d = Driver(Topology(1, 4))
    d.add(full_finetune("A", (0, 1, 2, 3), (0, 1), critic=ClusterSpec(1, (1, 2))))
    d.send(ClusterRequested(0, "A", "actor_train", 1))
    d.apply_all()
    with pytest.raises(EventError, match=r"holds GPUs \[1\] of it in actor_train: it would wait for itself"):
        d.sched.handle(ClusterRequested(1, "A", "critic", 2))
    assert not d.sched.pipelines["A"].pending and not d.sched.queue
    with pytest.raises(EventError, match="wait for itself"):  # the rollout cluster as a gang too
        d.sched.handle(ClusterRequested(1, "A", "actor_infer", 0))
    decisions = d.sched.handle(ClusterReleasedAndRequested(2, "A", "actor_train", "critic", 2))
    assert [describe(x) for x in decisions] == ["grant A/critic [1, 2]"]
