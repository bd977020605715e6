"""Look-ahead on loans (rlix.policy.look_ahead): measured move times and absences, loans that
do not pay kept back, and loans reclaimed on time. Golden runs worked out by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlix.policy import (
    ClusterReleased,
    ClusterReleasedAndRequested,
    ClusterRequested,
    ClusterSpec,
    DecisionFailed,
    PipelineKind,
    PipelineSpec,
    PolicyConfig,
    Priority,
    Shrink,
    Tick,
    Topology,
)
from rlix.policy.placement import RoundPlanner, may_receive
from rlix.policy.state import PipelineState
from tests.policy.drive import Driver


def spec(pid: str, home: tuple[int, ...], pool: tuple[int, ...]) -> PipelineSpec:
    """A pipeline trained on its home (TP 1), rolling out TP 1 over its home first, then the rest."""
    return PipelineSpec(
        pid, PipelineKind.FULL_FINETUNE,
        {"actor_infer": ClusterSpec(1, home + tuple(g for g in pool if g not in home)),
         "actor_train": ClusterSpec(1, home)},
        home=home,
    )


def at(driver: Driver, now: float) -> None:
    """Let time pass to `now` and carry out everything outstanding then."""
    driver.send(Tick(now))
    driver.apply_all()


def two_homes(config: PolicyConfig) -> Driver:
    """O at home on GPUs 0-1, B on 2-3, each may roll out on all four. Both roll out at 0
    (loads take 2 s), O trains from 10 to 20 and is away (publishing) until 30, rolls out
    again, trains from 40 to 50 and is away again from 50: by then it has been away 10 s once."""
    driver = Driver(Topology(1, 4), config)
    driver.add(spec("O", (0, 1), (0, 1, 2, 3)), spec("B", (2, 3), (0, 1, 2, 3)))
    driver.send(ClusterRequested(0.0, "O", "actor_infer", Priority.ROLLOUT, 100.0))
    driver.send(ClusterRequested(0.0, "B", "actor_infer", Priority.ROLLOUT, 100.0))
    at(driver, 2.0)  # every Expand applied 2 s after it was emitted
    for start in (10.0, 40.0):
        driver.send(ClusterReleasedAndRequested(start, "O", "actor_infer", "actor_train", Priority.ACTOR_TRAIN))
        at(driver, start + 1.0)  # O's rollout ranks offloaded in 1 s, its training granted
        driver.send(ClusterReleased(start + 10.0, "O", "actor_train"))
        if start == 10.0:
            at(driver, start + 12.0)  # its first absence: nothing known yet, so B is lent 0-1
            driver.send(ClusterRequested(start + 20.0, "O", "actor_infer", Priority.ROLLOUT, 100.0))
            at(driver, start + 23.0)
    return driver


def ranks_on(driver: Driver, pid: str, gpus: set[int]) -> int:
    return sum(1 for r in driver.sched.pipelines[pid].active.values() if gpus & set(r.gpus))


def test_the_core_measures_loads_offloads_and_absences() -> None:
    # The timeline is written for a 30-s no-reversal interval (at the default, 90 s, one
    # rebalance waits and one offload fewer is measured).
    driver = two_homes(PolicyConfig(min_rebalance_interval_s=30.0))
    o, b = driver.sched.pipelines["O"], driver.sched.pipelines["B"]
    assert o.load_s == 2.0 and b.load_s == 2.0  # emitted at 0 (and 30 for O), applied 2 s later
    # Offloads, a running mean weighing each new one half: two ranks given to B at 2 and
    # applied at once (0 s, a measurement like any), then two at 10 -> 11 and two at 40 -> 41.
    assert o.offload_s == ((((0.0 + 1.0) / 2 + 1.0) / 2 + 1.0) / 2 + 1.0) / 2 == 0.9375
    assert sorted(driver.sched.away) == ["O"]
    assert o.last_away_s == 10.0 and o.away_since_s == 50.0  # away 20-30, and again since 50


def test_a_loan_that_pays_is_made_and_reclaimed_its_offload_time_before_the_owner_returns() -> None:
    # Without waking O ahead (rlix.policy.wake_ahead, tested on its own): its home is due free
    # when it is back, not its load time before.
    driver = two_homes(PolicyConfig(loan_payback=1.0, wake_ahead=False))
    sched = driver.sched
    b = sched.pipelines["B"]
    # Back at 60; B's moves take 2 + offload: 10 s away >= (1 + 1) * (2 + offload): lent.
    assert 10.0 >= 2 * (b.load_s + b.offload_s)
    at(driver, 50.5)
    assert ranks_on(driver, "B", {0, 1}) == 2
    assert sched.wake_at_s == 60.0 - b.offload_s
    lines = driver.send(Tick(sched.wake_at_s))
    assert [line for line in lines if line.startswith("shrink")] == ["shrink B2 reclaim", "shrink B3 reclaim"]
    assert ranks_on(driver, "B", {0, 1}) == 0
    assert not any(line.startswith("expand B") for line in lines)  # not lent again so near


def test_a_loan_whose_reclaim_failed_is_reclaimed_again_after_its_back_off() -> None:
    """As above; the reclaim of B's rank 2 fails (its actor did not stop): the rank backs off
    (5 s) like any rank whose shrink failed, and only then is reclaimed again."""
    driver = two_homes(PolicyConfig(loan_payback=1.0, wake_ahead=False, retry_backoff_s=5.0))
    sched = driver.sched
    at(driver, 50.5)
    due = sched.wake_at_s
    shrinks = [x for x in sched.handle(Tick(due)) if isinstance(x, Shrink)]
    assert [(s.dp_rank, s.reason) for s in shrinks] == [(2, "reclaim"), (3, "reclaim")]
    sched.handle(DecisionFailed(due + 0.5, shrinks[0].decision_id, "actor did not stop"))
    for t in (due + 1.0, due + 5.0):
        assert not any(isinstance(x, Shrink) and x.dp_rank == 2 for x in sched.handle(Tick(t)))
    again = [x for x in sched.handle(Tick(due + 5.5)) if isinstance(x, Shrink)]
    assert [(s.dp_rank, s.reason) for s in again] == [(2, "reclaim")]


def test_a_loan_that_would_not_pay_is_not_made() -> None:
    driver = two_homes(PolicyConfig(loan_payback=3.0))
    b = driver.sched.pipelines["B"]
    assert 10.0 < 4 * (b.load_s + b.offload_s)
    at(driver, 50.5)
    assert ranks_on(driver, "B", {0, 1}) == 0
    assert driver.sched.pipelines["O"].away_since_s == 50.0


def test_without_look_ahead_the_home_is_lent_and_kept_until_the_owner_returns() -> None:
    driver = two_homes(PolicyConfig(look_ahead=False, loan_payback=3.0))
    at(driver, 50.5)
    assert ranks_on(driver, "B", {0, 1}) == 2
    assert driver.sched.wake_at_s == math.inf
    at(driver, 59.9)
    assert ranks_on(driver, "B", {0, 1}) == 2


def test_an_owner_late_by_more_than_its_last_absence_is_no_longer_expected() -> None:
    """O, away 10 s last time, is expected back at 60: the loan of its home would not pay
    (payback 3) and is not made, until O is late by more than 10 s: from then on its home is
    lent as any free GPU."""
    driver = two_homes(PolicyConfig(loan_payback=3.0, wake_ahead=False))
    at(driver, 50.5)
    assert ranks_on(driver, "B", {0, 1}) == 0
    at(driver, 70.0)  # late by exactly its last absence: still expected
    assert ranks_on(driver, "B", {0, 1}) == 0
    at(driver, 70.5)
    assert ranks_on(driver, "B", {0, 1}) == 2


def test_a_home_shared_with_another_home_is_no_loan() -> None:
    """B's home covers GPU 1 too: only GPU 0 is O's alone, and only it is kept for O."""
    driver = Driver(Topology(1, 4), PolicyConfig(loan_payback=3.0))
    driver.add(spec("O", (0, 1), (0, 1, 2, 3)), spec("B", (1, 2, 3), (0, 1, 2, 3)))
    driver.send(ClusterRequested(0.0, "B", "actor_infer", Priority.ROLLOUT, 100.0))
    at(driver, 2.0)
    for start in (10.0, 40.0):
        driver.send(ClusterRequested(start, "O", "actor_train", Priority.ACTOR_TRAIN))
        at(driver, start + 1.0)
        driver.send(ClusterReleased(start + 10.0, "O", "actor_train"))
        at(driver, start + 12.0)
        if start == 10.0:
            driver.send(ClusterRequested(start + 20.0, "O", "actor_train", Priority.ACTOR_TRAIN))
            at(driver, start + 21.0)
            driver.send(ClusterReleased(start + 25.0, "O", "actor_train"))
            at(driver, start + 26.0)
    # O away since 50, back at 55 (its last absence, 30-35, was 5 s): too soon for B's loan
    # on GPU 0, O's alone; GPU 1 is B's home too, so no loan, and B keeps it.
    assert driver.sched.pipelines["O"].last_away_s == 5.0
    assert ranks_on(driver, "B", {0}) == 0
    assert ranks_on(driver, "B", {1}) == 1


@settings(max_examples=60, deadline=None)
@given(away_s=st.floats(10.0, 30.0), load_s=st.floats(0.1, 4.0), offload_s=st.floats(0.1, 4.0),
       payback=st.floats(0.0, 4.0))
def test_a_loan_is_made_exactly_when_it_pays_and_never_outstays_its_offload_time(
    away_s: float, load_s: float, offload_s: float, payback: float
) -> None:
    """Whatever the times: after O's second departure, B is lent O's home exactly when O's
    expected absence is at least (1 + payback) times B's load plus offload, and no rank of B
    is left there once its offload must start."""
    driver = Driver(Topology(1, 4), PolicyConfig(loan_payback=payback))
    driver.add(spec("O", (0, 1), (0, 1, 2, 3)), spec("B", (2, 3), (0, 1, 2, 3)))
    driver.send(ClusterRequested(0.0, "B", "actor_infer", Priority.ROLLOUT, 1000.0))
    at(driver, load_s)  # B on all four GPUs
    t = 100.0
    for cycle in range(2):
        driver.send(ClusterRequested(t, "O", "actor_train", Priority.ACTOR_TRAIN))  # preempts B on 0-1
        at(driver, t + offload_s)
        driver.send(ClusterReleased(t + 10.0, "O", "actor_train"))  # O away from t + 10
        at(driver, t + 10.0 + load_s)
        if cycle == 0:
            t += 10.0 + away_s
    b = driver.sched.pipelines["B"]
    assert (b.load_s, b.offload_s) == (pytest.approx(load_s), pytest.approx(offload_s))
    horizon = (1.0 + payback) * (load_s + offload_s)
    if abs(away_s - horizon) < 1e-6:
        return  # a tie: either is right
    assert (ranks_on(driver, "B", {0, 1}) > 0) == (away_s > horizon)
    back = t + 10.0 + away_s
    due = back - offload_s
    if away_s > horizon:
        assert driver.sched.wake_at_s == pytest.approx(due)
        due = driver.sched.wake_at_s
    driver.send(Tick(due))
    at(driver, due + offload_s)  # the reclaims' offloads end as O returns
    assert ranks_on(driver, "B", {0, 1}) == 0


def three_homes() -> Driver:
    """O, B and C at home on GPUs 0-1, 2-3 and 4-5, each rolling out TP 1 over all six. O goes
    as in two_homes: by 50.5 it is away, expected back at 60, too soon for any loan to pay
    (payback 3), so its home is kept back and free; B and C hold two GPUs each."""
    pool = (0, 1, 2, 3, 4, 5)
    driver = Driver(Topology(1, 6), PolicyConfig(loan_payback=3.0, min_rebalance_interval_s=30.0))
    driver.add(spec("O", (0, 1), pool), spec("B", (2, 3), pool), spec("C", (4, 5), pool))
    for pid in "OBC":
        driver.send(ClusterRequested(0.0, pid, "actor_infer", Priority.ROLLOUT, 100.0))
    at(driver, 2.0)
    for start in (10.0, 40.0):
        driver.send(ClusterReleasedAndRequested(start, "O", "actor_infer", "actor_train", Priority.ACTOR_TRAIN))
        at(driver, start + 1.0)
        driver.send(ClusterReleased(start + 10.0, "O", "actor_train"))
        if start == 10.0:
            at(driver, start + 12.0)
            driver.send(ClusterRequested(start + 20.0, "O", "actor_infer", Priority.ROLLOUT, 100.0))
            at(driver, start + 23.0)
    at(driver, 50.5)
    assert ranks_on(driver, "B", {0, 1}) == ranks_on(driver, "C", {0, 1}) == 0
    assert driver.held("B") == driver.held("C") == 2
    return driver


def test_a_first_bundle_comes_from_a_donor_before_a_home_kept_back() -> None:
    """C ends its rollout and B is lent C's GPUs; when C starts again, its first bundle is
    taken from B (above its target now) rather than from O's free home, kept back for O."""
    driver = three_homes()
    driver.send(ClusterReleased(51.0, "C", "actor_infer"))
    at(driver, 52.0)
    assert driver.held("B") == 4 and driver.held("C") == 0
    lines = driver.send(ClusterRequested(53.0, "C", "actor_infer", Priority.ROLLOUT, 100.0))
    assert any(line.startswith("shrink B") and line.endswith("rebalance") for line in lines)
    at(driver, 54.0)
    assert driver.held("C") == 1 and ranks_on(driver, "C", {0, 1}) == 0
    at(driver, 59.9)
    assert ranks_on(driver, "B", {0, 1}) == ranks_on(driver, "C", {0, 1}) == 0  # O comes back to it free


def test_a_first_bundle_found_nowhere_else_takes_a_home_kept_back() -> None:
    """A gang of G (training on GPUs 2-5) preempts every rank of B and C: the only free GPUs
    are O's kept-back home, and a first bundle comes first, so each gets one there."""
    driver = three_homes()
    pool = (0, 1, 2, 3, 4, 5)
    g = PipelineSpec("G", PipelineKind.FULL_FINETUNE,
                     {"actor_infer": ClusterSpec(1, pool), "actor_train": ClusterSpec(1, (2, 3, 4, 5))})
    driver.add(g)
    driver.send(ClusterRequested(51.0, "G", "actor_train", Priority.ACTOR_TRAIN))
    at(driver, 52.0)
    assert ranks_on(driver, "B", {0, 1}) == ranks_on(driver, "C", {0, 1}) == 1


def test_a_first_bundle_is_not_lent_a_home_kept_back_whose_loans_are_due_for_reclaim() -> None:
    """As above, but the gang comes at 57.7, when rule 2 already reclaims loans on O's home: O
    is due back at 60 and woken 2 s ahead (its load), so its home is due free at 58, less
    B's and C's measured offloads. A rank lent there would be shrunk as soon as it had loaded
    (and, with moves that take no time, lent again at once, for ever), so B and C wait."""
    driver = three_homes()
    pool = (0, 1, 2, 3, 4, 5)
    g = PipelineSpec("G", PipelineKind.FULL_FINETUNE,
                     {"actor_infer": ClusterSpec(1, pool), "actor_train": ClusterSpec(1, (2, 3, 4, 5))})
    driver.add(g)
    at(driver, 57.7)
    assert ranks_on(driver, "O", {0, 1}) == 0  # not woken yet: its home is free
    lines = driver.send(ClusterRequested(57.7, "G", "actor_train", Priority.ACTOR_TRAIN))
    assert sum(line.startswith("shrink") for line in lines) == 4  # every rank of B and C
    assert not [line for line in lines if line.startswith("expand")]
    at(driver, 57.7)
    assert driver.held("B") == driver.held("C") == 0
    assert not driver.outstanding


def b_takes_then_borrows_c(driver: Driver) -> None:
    """C rolls out alone from 0; B starts at 10 and takes its share of C's GPUs by a rebalance
    (B may not donate, nor C take from donors, until 100); C's rollout ends at 20 and B is lent
    the rest. Loads take 2 s."""
    driver.send(ClusterRequested(0.0, "C", "actor_infer", Priority.ROLLOUT, 100.0))
    at(driver, 2.0)
    driver.send(ClusterRequested(10.0, "B", "actor_infer", Priority.ROLLOUT, 100.0))
    at(driver, 12.0)
    driver.send(ClusterReleased(20.0, "C", "actor_infer"))
    at(driver, 22.0)


def owner_back_short(config: PolicyConfig) -> Driver:
    """C rolls out alone on six GPUs; at 10 B starts and takes three of them by a rebalance
    (so B may not donate until 100); at 20 C ends and B is lent the rest. At 30 O starts: the
    split gives O and B three each, and O's first bundle (no interval for a first bundle)
    comes from B."""
    pool = (0, 1, 2, 3, 4, 5)
    driver = Driver(Topology(1, 6), config)
    driver.add(spec("O", (0, 1), pool), spec("B", (2, 3), pool), spec("C", (4, 5), pool))
    b_takes_then_borrows_c(driver)
    assert driver.held("B") == 6 and driver.sched.pipelines["B"].last_rebalanced_in_s == 10.0
    driver.send(ClusterRequested(30.0, "O", "actor_infer", Priority.ROLLOUT, 100.0))
    at(driver, 32.0)
    assert driver.sched.targets == {"O": 3, "B": 3}
    return driver


def test_an_owner_takes_its_home_back_from_a_pipeline_a_rebalance_just_gave_ranks() -> None:
    """Rule 3: short of its share, O takes its own home (GPUs 0-1) back from B although B was
    given ranks by a rebalance 20 s before (the 90-s interval); not a third GPU elsewhere,
    which would reverse the split. Once B may donate again, O gets its third."""
    driver = owner_back_short(PolicyConfig())
    assert ranks_on(driver, "O", {0, 1}) == 2 and driver.held("O") == 2
    at(driver, 100.0)
    assert driver.held("O") == 3 and driver.held("B") == 3


def test_without_look_ahead_the_interval_keeps_the_owner_off_its_home() -> None:
    driver = owner_back_short(PolicyConfig(look_ahead=False))
    assert driver.held("O") == 1 and ranks_on(driver, "B", {0, 1}) == 1


def test_a_planner_that_leaves_the_owner_short_of_its_home_breaks_6(monkeypatch: pytest.MonkeyPatch) -> None:
    """The split check (invariant 6) finds O's home takeable its own way, from the specs and
    the holdings: a planner without rule 3 fails it."""
    from rlix.policy import donors
    from rlix.policy.errors import InvariantViolation

    monkeypatch.setattr(donors.Donors, "_home_back", lambda self, pipeline, planner: None)
    with pytest.raises(InvariantViolation, match="invariant 6"):
        owner_back_short(PolicyConfig())


def spec_tp(pid: str, home: tuple[int, ...], pool: tuple[int, ...], tp: int) -> PipelineSpec:
    """As `spec`, rolling out at TP `tp` (bundles of `tp` GPUs, in pool order)."""
    return PipelineSpec(
        pid, PipelineKind.FULL_FINETUNE,
        {"actor_infer": ClusterSpec(tp, home + tuple(g for g in pool if g not in home)),
         "actor_train": ClusterSpec(1, home)},
        home=home,
    )


def wide_owner_back_short(config: PolicyConfig) -> Driver:
    """As `owner_back_short` on eight GPUs, with O at home on 0-3 rolling out at TP 2 and the
    others at TP 1: C alone on all eight, B takes four by a rebalance at 10 (B may not donate
    until 100), B is lent C's at 20, O starts at 30 with twice B's share (targets O 4, B 3)
    and its first bundle comes from B."""
    pool = tuple(range(8))
    driver = Driver(Topology(1, 8), config)
    driver.add(spec_tp("O", (0, 1, 2, 3), pool, 2), spec("B", (4, 5), pool), spec("C", (6, 7), pool))
    b_takes_then_borrows_c(driver)
    assert driver.held("B") == 8 and driver.sched.pipelines["B"].last_rebalanced_in_s == 10.0
    driver.send(ClusterRequested(30.0, "O", "actor_infer", Priority.ROLLOUT, 100.0))
    at(driver, 32.0)
    assert driver.sched.targets == {"O": 4, "B": 3}
    return driver


def test_a_tp2_owner_takes_its_home_back_from_tp1_ranks() -> None:
    """Rule 3 across TP sizes: O's second bundle is its own home's, held by two TP-1 ranks of
    B that a rebalance just gave ranks; both are taken within the interval."""
    driver = wide_owner_back_short(PolicyConfig())
    assert driver.held("O") == 4 and ranks_on(driver, "O", {0, 1, 2, 3}) >= 1
    assert ranks_on(driver, "B", {0, 1, 2, 3}) <= 2


def test_a_tp2_owner_without_look_ahead_waits_out_the_interval() -> None:
    driver = wide_owner_back_short(PolicyConfig(look_ahead=False))
    assert driver.held("O") == 2
    at(driver, 100.0)
    assert driver.held("O") == 4


def a_donor_comes_home(config: PolicyConfig) -> Driver:
    """C rolls out alone on six GPUs; at 10 B starts and takes three of C's by a rebalance (C
    gave ranks away at 10: it may take none from donors until 100, nor B give any); at 20 C
    ends and B is lent the rest; at 30 C comes back with B's demand: targets three each, and
    C's first bundle comes from B."""
    pool = (0, 1, 2, 3, 4, 5)
    driver = Driver(Topology(1, 6), config)
    driver.add(spec("O", (0, 1), pool), spec("B", (2, 3), pool), spec("C", (4, 5), pool))
    b_takes_then_borrows_c(driver)
    assert driver.sched.pipelines["C"].last_rebalanced_out_s == 10.0
    driver.send(ClusterRequested(30.0, "C", "actor_infer", Priority.ROLLOUT, 100.0))
    at(driver, 32.0)
    assert driver.sched.targets == {"B": 3, "C": 3}
    return driver


def test_an_owner_that_gave_ranks_away_still_takes_its_home_back() -> None:
    """C donated within the interval, yet it takes its own home (4-5) back at once, besides
    its first bundle (GPU 0, the lowest of B's); without look-ahead it waits until 100."""
    driver = a_donor_comes_home(PolicyConfig())
    assert driver.held("C") == 3 and ranks_on(driver, "C", {4, 5}) == 2 and driver.held("B") == 3
    driver = a_donor_comes_home(PolicyConfig(look_ahead=False))
    assert driver.held("C") == 1
    at(driver, 100.0)
    assert driver.held("C") == 3


def test_the_split_check_wants_a_home_back_from_a_recent_donor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Invariant 6 finds C's home takeable whatever C did within the interval: a planner that
    gates the home on the interval, as rlix once did, fails it."""
    from rlix.policy import donors
    from rlix.policy.errors import InvariantViolation

    home_back = donors.Donors._home_back

    def gated(self: donors.Donors, pipeline: PipelineState, planner: RoundPlanner) -> object:
        return home_back(self, pipeline, planner) if may_receive(self.sched, pipeline) else None

    monkeypatch.setattr(donors.Donors, "_home_back", gated)
    with pytest.raises(InvariantViolation, match="invariant 6"):
        a_donor_comes_home(PolicyConfig())


def trains_every_10_s(config: PolicyConfig, back_at: float) -> Driver:
    """B rolls out on all four GPUs from 0 (loads take 2 s, offloads 1 s). O, at home on 0-1,
    rolls out on GPU 0 only: its first bundle comes from B at 5, it trains at 10 and at 20
    (gangs on 0-1, preempting B's rank on GPU 1 each time), back to roll out after each
    (at 12, then at `back_at`). Its training period is then 10 s: next due at 30."""
    driver = Driver(Topology(1, 4), config)
    o = PipelineSpec("O", PipelineKind.FULL_FINETUNE,
                     {"actor_infer": ClusterSpec(1, (0,)), "actor_train": ClusterSpec(1, (0, 1))}, home=(0, 1))
    driver.add(o, spec("B", (2, 3), (0, 1, 2, 3)))
    driver.send(ClusterRequested(0.0, "B", "actor_infer", Priority.ROLLOUT, 100.0))
    at(driver, 2.0)
    driver.send(ClusterRequested(5.0, "O", "actor_infer", Priority.ROLLOUT, 1.0))
    at(driver, 6.0)
    for train_at, back in ((10.0, 12.0), (20.0, back_at)):
        driver.send(ClusterReleasedAndRequested(train_at, "O", "actor_infer", "actor_train", Priority.ACTOR_TRAIN))
        at(driver, train_at + 1.0)
        driver.send(ClusterReleasedAndRequested(back, "O", "actor_train", "actor_infer", Priority.ROLLOUT, 1.0))
        at(driver, back + 2.0)
    o = driver.sched.pipelines["O"]
    assert (o.gang_at_s, o.gang_period_s) == (20.0, 10.0)
    return driver


def test_a_loan_the_owners_training_would_cut_is_not_made() -> None:
    """Rule 4: back at 25 with one rank on its home, O leaves GPU 1 free; B (load 2 s, offload
    1 s) would be lent it, but O's training is due at 30, before 25 + (1 + 1) x 3 = 31."""
    driver = trains_every_10_s(PolicyConfig(loan_payback=1.0), back_at=25.0)
    assert driver.held("O") == 1 and ranks_on(driver, "B", {0, 1}) == 0 and driver.held("B") == 2


def test_a_loan_that_pays_before_the_owners_training_is_made() -> None:
    """Back at 22, the loan would pay by 28, before O's training is due at 30."""
    driver = trains_every_10_s(PolicyConfig(loan_payback=1.0), back_at=22.0)
    assert ranks_on(driver, "B", {0, 1}) == 1 and driver.held("B") == 3


def test_without_look_ahead_the_owners_training_cuts_the_loan() -> None:
    driver = trains_every_10_s(PolicyConfig(look_ahead=False), back_at=25.0)
    assert ranks_on(driver, "B", {0, 1}) == 1 and driver.held("B") == 3


def test_a_training_late_by_more_than_half_a_period_is_no_longer_expected() -> None:
    """As above, back at 25: O's training (period 10 s) is due at 30 and keeps GPU 1 from B
    until it is late by more than half a period; from 35 on GPU 1 is lent as any free GPU."""
    driver = trains_every_10_s(PolicyConfig(loan_payback=1.0), back_at=25.0)
    at(driver, 35.0)
    assert ranks_on(driver, "B", {1}) == 0
    at(driver, 35.5)
    assert ranks_on(driver, "B", {1}) == 1


@settings(max_examples=40, deadline=None)
@given(back_at=st.floats(21.5, 29.9), payback=st.floats(0.0, 3.0))
def test_a_loan_before_the_owners_training_is_made_exactly_when_it_pays(back_at: float, payback: float) -> None:
    """Rule 4 as a property: B (load 2 s, offload 1 s) is lent O's free GPU 1 at `back_at`
    exactly when O's training, due at 30, leaves it (1 + payback) x 3 s."""
    margin = 30.0 - (back_at + (1.0 + payback) * 3.0)
    if abs(margin) < 1e-6:
        return
    driver = trains_every_10_s(PolicyConfig(loan_payback=payback), back_at=back_at)
    assert (ranks_on(driver, "B", {1}) == 1) == (margin > 0)


def test_a_home_is_not_lent_in_the_instant_between_its_owners_init_and_first_rollout() -> None:
    """A's and B's inits end at 60 together. A asks to roll out first and gets its home; when
    B releases its init, its home is not lent to A (B is expected back at once,
    `note_init_done`), and B's rollout then starts on it with no one to move."""
    driver = Driver(Topology(1, 4), PolicyConfig())
    driver.add(spec("A", (0, 1), (0, 1, 2, 3)), spec("B", (2, 3), (0, 1, 2, 3)))
    driver.send(ClusterRequested(0.0, "A", "actor_train", Priority.INIT))
    driver.send(ClusterRequested(0.0, "B", "actor_train", Priority.INIT))
    at(driver, 1.0)
    driver.send(ClusterReleased(60.0, "A", "actor_train"))
    assert driver.send(ClusterRequested(60.0, "A", "actor_infer", Priority.ROLLOUT, 16.0)) == ["expand A0", "expand A1"]
    assert driver.send(ClusterReleased(60.0, "B", "actor_train")) == []
    assert driver.sched.pipelines["B"].last_away_s == 0.0
    # B's ranks 0-1 are its home's GPUs 2-3 (spec lists the home first).
    assert driver.send(ClusterRequested(60.0, "B", "actor_infer", Priority.ROLLOUT, 16.0)) == [
        "expand B0", "expand B1"]


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_own_home_is_the_home_no_other_covers_and_the_slots_on_it(data: st.DataObject) -> None:
    """`own_home` (one pass over the slots on the pipeline's GPUs, cached) against a brute-force
    reading of the specs: the home's GPUs no other home covers, every slot sharing a GPU with
    them, and the pipeline's ranks wholly on them."""
    from rlix.policy import PipelineRegistered, Scheduler
    from rlix.policy.look_ahead import own_home, own_home_slots
    from tests.policy.builders import pipeline_specs, topologies

    topology = data.draw(topologies())
    sched = Scheduler(topology)
    specs = [data.draw(pipeline_specs(topology, f"p{i}", homes=True)) for i in range(data.draw(st.integers(1, 4)))]
    for pipeline_spec in specs:
        sched.handle(PipelineRegistered(0.0, pipeline_spec))
    cluster = sched.cluster
    for pipeline_spec in specs:
        pipeline = sched.pipelines[pipeline_spec.pipeline_id]
        others = {g for s in specs if s is not pipeline_spec for g in s.home}
        gpus = tuple(g for g in pipeline_spec.home if g not in others)
        slots_near = [s for s, bundle in enumerate(cluster.slot_gpus) if set(bundle) & set(gpus)]
        ranks_on = [r.slot for r in pipeline.ranks if set(r.gpus) <= set(gpus)]
        expected_bits = sum(1 << cluster.slot_of_bit.index(s) for s in slots_near)
        expected_slots = sum(1 << cluster.slot_of_bit.index(s) for s in set(ranks_on))
        for _ in range(2):  # computed, then from the cache
            assert own_home(sched, pipeline) == (gpus, expected_bits)
            assert own_home_slots(sched, pipeline) == expected_slots
