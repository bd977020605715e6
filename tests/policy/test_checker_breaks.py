"""Each check of `rlix.policy.invariants` against a state and decision list that breaks it.

Every case starts from a state a real scheduler reached (so every other check passes on it),
hands `InvariantChecker.after_round` a decision list that breaks exactly one invariant, and
expects that invariant's number; where a check has a boundary (the pacing bound, the back-off
deadline) the case just inside it must pass. Going through `after_round`, not the check
function alone, also catches a check that is no longer called.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from rlix.policy import (
    ClusterReleased,
    ClusterRequested,
    ClusterSpec,
    DecisionFailed,
    Event,
    InvariantViolation,
    PipelineRemoved,
    PolicyConfig,
    RolloutProgressed,
    Scheduler,
    Tick,
    Topology,
)
from rlix.policy.decisions import AllowRollout, Decision, Expand, Grant, Shrink
from rlix.policy.invariants import InvariantChecker
from rlix.policy.invariants_split import check_rebalance_keeps_targets, check_split
from tests.policy.builders import full_finetune
from tests.policy.drive import Driver

#: Decision ids no round has used (the checks read them only to match `requires`).
FAKE = 900


def breaks(sched: Scheduler, decisions: Sequence[Decision], event: Event | None = None) -> int | None:
    """The invariant `after_round` reports for `decisions` on the state as it is, or None."""
    checker = InvariantChecker(sched)
    try:
        checker.after_round(event if event is not None else Tick(sched.now), list(decisions))
    except InvariantViolation as violation:
        return violation.number
    return None


def rolling(num_gpus: int = 4, policy: str = "rlix") -> Driver:
    """A (TP 2, rollout on every GPU, trains on 0-1) rolls out alone on every GPU; B (TP 1,
    trains on 2-3) is admitted and idle."""
    d = Driver(Topology(1, num_gpus), policy=policy)
    gpus = tuple(range(num_gpus))
    d.add(full_finetune("A", gpus, (0, 1), tp=2, max_staleness=1), full_finetune("B", gpus, (2, 3)))
    d.send(ClusterRequested(1, "A", "actor_infer", 6, estimate=10))
    d.apply_all()
    assert sorted(d.sched.pipelines["A"].active) == list(range(num_gpus // 2))
    return d


def test_the_states_below_pass_every_check() -> None:
    assert breaks(rolling().sched, []) is None
    assert breaks(backing_off().sched, []) is None
    assert breaks(blocked_request().sched, []) is None
    assert breaks(under_target().sched, []) is None


# --- invariant 3: a failed shrink backs off -------------------------------------------------


def backing_off() -> Driver:
    """B's training preempts A's rank 1; the shrink fails, so rank 1 backs off (5 s)."""
    d = rolling()
    decisions = d.sched.handle(ClusterRequested(2, "B", "actor_train", 1))
    shrink = next(x for x in decisions if isinstance(x, Shrink))
    d.sched.handle(DecisionFailed(2, shrink.decision_id, "stuck"))
    assert d.sched.pipelines["A"].ranks[1].shrink_retry_after_s == 2 + PolicyConfig().retry_backoff_s
    return d


def preempt_rank_1(sched: Scheduler) -> list[Decision]:
    return [Shrink(FAKE, "A", 1, (2, 3), "preempt"), Grant(FAKE + 1, "B", "actor_train", 1, (2, 3), (FAKE,))]


def test_shrinking_a_rank_again_while_it_backs_off_breaks_3() -> None:
    d = backing_off()
    assert breaks(d.sched, preempt_rank_1(d.sched)) == 3
    d.sched.handle(Tick(6.9))
    assert breaks(d.sched, preempt_rank_1(d.sched)) == 3
    d.sched.handle(Tick(7.0))  # the back-off is over at 2 + 5 s
    assert breaks(d.sched, preempt_rank_1(d.sched)) is None


# --- invariants 3 and 4: why rollout was shrunk ---------------------------------------------


def test_a_shrink_for_an_unknown_reason_breaks_3_under_every_policy() -> None:
    for policy in ("rlix", "gap-ratio"):
        d = rolling(policy=policy)
        assert breaks(d.sched, [Shrink(FAKE, "A", 1, (2, 3), "tidy")]) == 3


def test_a_rebalance_without_its_expansion_breaks_4_where_promised() -> None:
    lone = [Shrink(FAKE, "A", 1, (2, 3), "rebalance")]
    assert breaks(rolling().sched, lone) == 4
    assert breaks(rolling(policy="gap-ratio").sched, lone) is None  # the RLix model promises no 4
    followed = lone + [Expand(FAKE + 1, "B", 2, (2,), (FAKE,))]
    assert breaks(rolling().sched, followed) is None


# --- invariant 5: a drain is bounded, only for a grant, only at home ------------------------


def _drain_driver(config: PolicyConfig, a_home: tuple[int, ...]) -> Driver:
    """A (TP 2, at home on `a_home`) rolls out on all four GPUs; B trains on 2-3."""
    d = Driver(Topology(1, 4), config=config)
    a = dataclasses.replace(full_finetune("A", (0, 1, 2, 3), (0, 1), tp=2, max_staleness=1), home=a_home)
    d.add(a, full_finetune("B", (0, 1, 2, 3), (2, 3)))
    d.send(ClusterRequested(1, "A", "actor_infer", 6, estimate=10))
    d.apply_all()
    return d


def test_a_drain_past_the_bound_not_for_a_grant_or_of_a_loan_breaks_5() -> None:
    d = _drain_driver(PolicyConfig(max_drain_s=4.0), (0, 1, 2, 3))

    def drained(seconds: float, reason: str = "preempt") -> list[Decision]:
        shrink = Shrink(FAKE, "A", 1, (2, 3), reason, drain_s=seconds)
        follow: Decision = (Grant(FAKE + 1, "B", "actor_train", 1, (2, 3), (FAKE,)) if reason == "preempt"
                            else Expand(FAKE + 1, "B", 2, (2,), (FAKE,)))
        return [shrink, follow]

    assert breaks(d.sched, drained(4.0)) is None  # at the bound, on A's home
    assert breaks(d.sched, drained(4.5)) == 5
    assert breaks(d.sched, drained(1.0, "rebalance")) == 5
    assert breaks(_drain_driver(PolicyConfig(max_drain_s=4.0), (0, 1)).sched, drained(1.0)) == 5  # a loan
    assert breaks(_drain_driver(PolicyConfig(max_drain_s=0.0), (0, 1, 2, 3)).sched, drained(1.0)) == 5  # no drain at all
    own = [Shrink(FAKE, "A", 1, (2, 3), "preempt", drain_s=1.0), Grant(FAKE + 1, "A", "actor_train", 1, (0, 1), (FAKE,))]
    assert breaks(d.sched, own) == 5  # for its own grant


# --- invariant 5: no overtaking of a blocked request ----------------------------------------


def blocked_request() -> Driver:
    """G trains on 2-3; W's training on 1-2 is blocked by it and reserves 1 and 2; R rolls out
    on GPU 0 only (GPU 1 is reserved); L's reference pass on 1 queues behind W."""
    d = Driver(Topology(1, 4))
    d.add(full_finetune("G", (3,), (2, 3)), full_finetune("W", (3,), (1, 2)),
          full_finetune("R", (0, 1), (0,)), full_finetune("L", (3,), (0,), reference=ClusterSpec(1, (1,))))
    d.send(ClusterRequested(1, "G", "actor_train", 1))
    d.apply_all()
    d.send(ClusterRequested(2, "W", "actor_train", 1))
    d.send(ClusterRequested(3, "R", "actor_infer", 6, estimate=100))
    d.apply_all()
    d.send(ClusterRequested(4, "L", "reference", 4))
    assert sorted(d.sched.pipelines["R"].active) == [0]
    assert [r.pipeline_id for r in d.sched.queue] == ["W", "L"]
    return d


def test_rollout_expanding_onto_a_reserved_gpu_breaks_5() -> None:
    d = blocked_request()
    assert breaks(d.sched, [Expand(FAKE, "R", 1, (1,))]) == 5
    assert breaks(d.sched, [Expand(FAKE, "R", 0, (3,))]) is None  # GPU 3 is nobody's reservation


def test_a_later_request_granted_a_reserved_gpu_breaks_5() -> None:
    d = blocked_request()
    assert breaks(d.sched, [Grant(FAKE, "L", "reference", 4, (1,))]) == 5


def test_the_holder_the_request_waits_on_may_take_a_reserved_gpu() -> None:
    # W waits on G (G holds GPU 2 of W's mapping): G must be able to move on, so it may.
    d = blocked_request()
    assert breaks(d.sched, [Grant(FAKE, "G", "reference", 4, (1,))]) is None


# --- invariant 6: the split -----------------------------------------------------------------


def under_target() -> Driver:
    """D is 2 bundles short of its target and E 2 above, but the margin (2 bundles) keeps
    E's ranks where they are: D holds 1 GPU (target 3), E holds 3 (target 1)."""
    d = Driver(Topology(1, 4), PolicyConfig(rebalance_margin_bundles=2.0))
    d.add(full_finetune("E", (0, 1, 2, 3), (0,)), full_finetune("D", (0, 1, 2, 3), (0,)))
    d.send(ClusterRequested(0, "E", "actor_infer", 6, estimate=100))
    d.apply_all()
    d.send(ClusterRequested(1, "D", "actor_infer", 6, estimate=300))
    d.apply_all()
    d.send(RolloutProgressed(2, "E", 100))
    d.send(RolloutProgressed(2, "D", 300))
    assert d.sched.targets == {"E": 1, "D": 3}
    assert sorted(d.sched.pipelines["D"].active) == [0] and sorted(d.sched.pipelines["E"].active) == [1, 2, 3]
    return d


def test_a_rebalance_that_takes_a_pipeline_below_its_target_breaks_6() -> None:
    # The round claims D gave its rank 1 to E's rank 1: D went from 2 GPUs to the 1 it holds,
    # below its target of 3.
    d = under_target()
    moved = [Shrink(FAKE, "D", 1, (1,), "rebalance"), Expand(FAKE + 1, "E", 1, (1,), (FAKE,))]
    assert breaks(d.sched, moved) == 6
    # The round claims E gave its rank 0 to D's rank 0: E went from 4 GPUs to 3, still above
    # its target of 1.
    given = [Shrink(FAKE, "E", 0, (0,), "rebalance"), Expand(FAKE + 1, "D", 0, (0,), (FAKE,))]
    assert breaks(d.sched, given) is None


def test_a_preemption_before_a_rebalance_is_not_the_rebalance_s_doing() -> None:
    # D holds 1 GPU, target 3. The round claims D lost rank 1 to a request (a preemption),
    # then gave rank 3 to E's rank 3 for another's first bundle and was made whole by rank 0:
    # the rebalance left D where the preemption had put it (1 GPU), so 6 holds.
    d = under_target()
    relocated = [Shrink(FAKE, "D", 1, (1,), "preempt"), Shrink(FAKE + 1, "D", 3, (3,), "rebalance"),
                 Expand(FAKE + 2, "E", 3, (3,), (FAKE + 1,)), Expand(FAKE + 3, "D", 0, (0,), ())]
    check_rebalance_keeps_targets(d.sched, relocated)
    # Had the rebalance not made D whole again, it would have taken D from 2 GPUs to 1.
    with pytest.raises(InvariantViolation, match="invariant 6.*took D from 2 to 1"):
        check_rebalance_keeps_targets(d.sched, relocated[:3])


def test_targets_past_the_budget_break_6() -> None:
    d = under_target()
    d.sched.targets = {"E": 2, "D": 3}
    with pytest.raises(InvariantViolation, match="invariant 6.*sum past the budget"):
        check_split(d.sched)


def test_a_demanding_pipeline_without_a_bundle_in_its_target_breaks_6() -> None:
    d = under_target()
    d.sched.targets = {"E": 4, "D": 0}
    with pytest.raises(InvariantViolation, match="invariant 6.*no bundle"):
        check_split(d.sched)


# --- invariant 7: pacing --------------------------------------------------------------------


def test_allowing_rollout_past_version_plus_staleness_breaks_7() -> None:
    d = rolling()  # A: version 0, max_staleness 1, so steps up to 1 may roll out
    assert breaks(d.sched, [AllowRollout(FAKE, "A", "base", 1)]) is None
    assert breaks(d.sched, [AllowRollout(FAKE, "A", "base", 2)]) == 7
    assert breaks(d.sched, [AllowRollout(FAKE, "B", "base", 1)]) == 7  # B is on-policy (k = 0)


# --- invariants 3 and 9: holdings that disappear --------------------------------------------


def training_b() -> Driver:
    d = rolling()
    d.send(ClusterRequested(2, "B", "actor_train", 1))
    d.apply_all()
    assert "actor_train" in d.sched.pipelines["B"].holdings
    return d


def drop_holding(sched: Scheduler, pipeline_id: str) -> None:
    """A holding vanishes as if preempted (the GPU index stays consistent)."""
    hold = sched.pipelines[pipeline_id].holdings.pop("actor_train")
    sched.cluster.free(hold.gpus, hold)


def test_a_removed_pipeline_still_holding_a_gpu_breaks_9() -> None:
    d = training_b()
    assert breaks(d.sched, [], PipelineRemoved(2, "A")) == 9


def test_removing_one_pipeline_that_takes_anothers_holding_breaks_9() -> None:
    d = training_b()
    checker = InvariantChecker(d.sched)
    drop_holding(d.sched, "B")
    with pytest.raises(InvariantViolation, match="invariant 9.*B/actor_train disappeared"):
        checker.after_round(PipelineRemoved(2, "A"), [])


def test_a_holding_that_disappears_on_any_other_event_breaks_3() -> None:
    d = training_b()
    checker = InvariantChecker(d.sched)
    drop_holding(d.sched, "B")
    with pytest.raises(InvariantViolation, match="invariant 3"):
        checker.after_round(RolloutProgressed(2, "A", 5), [])


def test_a_holding_released_by_its_own_pipeline_is_fine() -> None:
    d = training_b()
    checker = InvariantChecker(d.sched)
    drop_holding(d.sched, "B")
    checker.after_round(ClusterReleased(2, "B", "actor_train"), [])


# --- invariants 1 and 2: ownership ----------------------------------------------------------


def test_a_lost_gpu_still_held_breaks_1() -> None:
    d = rolling()
    d.sched.cluster.offline.add(0)
    assert breaks(d.sched, []) == 1


def test_a_wrong_free_count_breaks_1() -> None:
    d = rolling()
    d.sched.cluster.num_free += 1
    assert breaks(d.sched, []) == 1


def test_a_gang_off_its_mapping_breaks_2() -> None:
    d = training_b()
    d.sched.pipelines["B"].holdings["actor_train"].gpus = (2,)
    assert breaks(d.sched, []) == 2


def test_a_stale_rollout_gpu_count_breaks_1() -> None:
    d = rolling()
    d.sched.pipelines["A"].num_active_gpus -= 2
    assert breaks(d.sched, []) == 1


def test_a_stale_busy_rank_count_breaks_1() -> None:
    d = rolling()
    d.sched.pipelines["A"].num_busy_active += 1
    assert breaks(d.sched, []) == 1
