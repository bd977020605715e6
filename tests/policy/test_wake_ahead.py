"""Waking an away pipeline's rollout ranks before it returns (rlix.policy.wake_ahead). Golden
runs on the look-ahead's two homes (tests/policy/test_look_ahead.two_homes), worked out by hand,
and a property: a rank is woken ahead only on its own home, loaded before the rollout asks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlix.policy import (
    ClusterReleased,
    ClusterReleasedAndRequested,
    ClusterRequested,
    InvariantViolation,
    PolicyConfig,
    Priority,
    Tick,
    Topology,
)
from rlix.policy.invariants_loans import check_warm
from rlix.policy.state import RankStatus
from tests.policy.drive import Driver
from tests.policy.test_look_ahead import at, ranks_on, spec, two_homes


def statuses(driver: Driver, pid: str) -> dict[int, str]:
    return {n: r.status.value for n, r in sorted(driver.sched.pipelines[pid].active.items())}


def test_an_owner_back_for_its_rollout_is_woken_its_load_time_before() -> None:
    """O came back from its last absence (20-30) with a rollout request, so from its second
    (since 50, expected back at 60) its ranks load on its home 0-1 its load time (2 s) before:
    B's loan there is reclaimed at 60 - 2 - B's offload (1.75 s), O's ranks expanded at 58, and
    the rollout O asks for at 60 starts on them with no load."""
    driver = two_homes(PolicyConfig(loan_payback=1.0))
    sched = driver.sched
    o, b = sched.pipelines["O"], sched.pipelines["B"]
    assert o.returns_rolling and o.load_s == 2.0 and b.offload_s == 1.75
    at(driver, 50.5)
    assert ranks_on(driver, "B", {0, 1}) == 2  # the loan pays (rule 1)
    assert sched.wake_at_s == 60.0 - 2.0 - 1.75
    assert driver.send(Tick(56.25)) == ["shrink B2 reclaim", "shrink B3 reclaim"]
    assert sched.wake_at_s == 58.0
    driver.apply_all()
    # Its home is due free at 58 now, 1.75 s away: B is not lent it again for so short a time.
    assert ranks_on(driver, "B", {0, 1}) == 0 and sched.wake_at_s == 58.0
    assert driver.send(Tick(58.0)) == ["expand O0", "expand O1"]
    at(driver, 60.0)  # loaded, and kept: O is not rolling out, no one else wants GPUs 0-1
    assert statuses(driver, "O") == {0: "active", 1: "active"}
    assert driver.send(ClusterRequested(60.0, "O", "actor_infer", Priority.ROLLOUT, 100.0)) == []
    assert o.rolling and statuses(driver, "O") == {0: "active", 1: "active"}


def test_without_wake_ahead_the_ranks_load_when_the_rollout_asks() -> None:
    driver = two_homes(PolicyConfig(loan_payback=1.0, wake_ahead=False))
    at(driver, 59.9)
    assert statuses(driver, "O") == {}
    lines = driver.send(ClusterRequested(60.0, "O", "actor_infer", Priority.ROLLOUT, 100.0))
    assert lines[:2] == ["expand O0", "expand O1"]


def test_nor_without_warm_ranks_since_they_would_be_released_at_once() -> None:
    driver = two_homes(PolicyConfig(loan_payback=1.0, keep_warm=False))
    at(driver, 59.9)
    assert statuses(driver, "O") == {}


def trains(driver: Driver, start: float) -> None:
    """O's rollout ends at `start` and it trains (its gang loaded within 1 s) until `start` + 10."""
    driver.send(ClusterReleasedAndRequested(start, "O", "actor_infer", "actor_train", Priority.ACTOR_TRAIN))
    at(driver, start + 1.0)
    driver.send(ClusterReleased(start + 10.0, "O", "actor_train"))


def back_for_training() -> Driver:
    """O rolls out and trains (10-20), is away (20-30) and comes back with a training request
    (its next batch already done), trains (30-40) and is away again from 40, expected at 50."""
    driver = Driver(Topology(1, 4), PolicyConfig(loan_payback=1.0))
    driver.add(spec("O", (0, 1), (0, 1, 2, 3)), spec("B", (2, 3), (0, 1, 2, 3)))
    driver.send(ClusterRequested(0.0, "O", "actor_infer", Priority.ROLLOUT, 100.0))
    driver.send(ClusterRequested(0.0, "B", "actor_infer", Priority.ROLLOUT, 100.0))
    at(driver, 2.0)
    trains(driver, 10.0)
    at(driver, 21.0)
    driver.send(ClusterRequested(30.0, "O", "actor_train", Priority.ACTOR_TRAIN))
    at(driver, 31.0)
    driver.send(ClusterReleased(40.0, "O", "actor_train"))
    return driver


def test_an_owner_back_for_training_is_not_woken() -> None:
    driver = back_for_training()
    o = driver.sched.pipelines["O"]
    assert not o.returns_rolling and o.last_away_s == 10.0 and o.away_since_s == 40.0
    for now in (47.0, 48.5, 49.9):
        at(driver, now)
        assert statuses(driver, "O") == {}


def test_the_first_absence_wakes_nothing() -> None:
    """Nothing is known of O's rhythm in its first absence (20-30): no expected return."""
    driver = Driver(Topology(1, 4), PolicyConfig(loan_payback=1.0))
    driver.add(spec("O", (0, 1), (0, 1, 2, 3)), spec("B", (2, 3), (2, 3)))
    driver.send(ClusterRequested(0.0, "O", "actor_infer", Priority.ROLLOUT, 100.0))
    at(driver, 2.0)
    trains(driver, 10.0)
    for now in (21.0, 27.0, 29.9):
        at(driver, now)
        assert statuses(driver, "O") == {}


def loaded_before_return(other_home: list[int], away_s: float, config: PolicyConfig) -> set[int]:
    """O (home 0-1, rolling out on 0-3) is away `away_s` once and comes back to roll out; the
    GPUs of its ranks loaded just before it is expected back from its second absence."""
    driver = Driver(Topology(1, 4), config)
    driver.add(spec("O", (0, 1), (0, 1, 2, 3)))
    if other_home:
        driver.add(spec("B", tuple(other_home), tuple(other_home)))
    driver.send(ClusterRequested(0.0, "O", "actor_infer", Priority.ROLLOUT, 100.0))
    at(driver, 2.0)
    trains(driver, 10.0)
    at(driver, 20.0)
    driver.send(ClusterRequested(20.0 + away_s, "O", "actor_infer", Priority.ROLLOUT, 100.0))
    start = 30.0 + away_s
    at(driver, start)
    trains(driver, start)
    at(driver, start + 10.0 + away_s - 0.01)
    return {g for r in driver.sched.pipelines["O"].active.values() for g in r.gpus}


@settings(max_examples=40, deadline=None)
@given(other_home=st.lists(st.integers(0, 3), max_size=2, unique=True), away_s=st.floats(3.0, 40.0))
def test_ranks_are_woken_exactly_on_the_owners_home_where_no_other_home_lies(
    other_home: list[int], away_s: float
) -> None:
    """What waking ahead adds to the warm ranks O keeps anyway is the GPUs of its home (0-1)
    that no other home covers: computed here from the specs, GPU by GPU."""
    woken = loaded_before_return(other_home, away_s, PolicyConfig())
    warm = loaded_before_return(other_home, away_s, PolicyConfig(wake_ahead=False))
    assert woken - warm == {g for g in (0, 1) if g not in other_home}
    assert warm <= woken


def test_the_warm_check_sees_a_rank_woken_ahead_off_its_home() -> None:
    """check_warm passes on the state the core reached at 58.5 (O's ranks 0-1 loading, woken
    ahead), and fails once one of them is said to load on GPU 2, B's home."""
    driver = two_homes(PolicyConfig(loan_payback=1.0))
    at(driver, 56.25)
    driver.send(Tick(58.0))
    sched = driver.sched
    rank = sched.pipelines["O"].active[0]
    assert rank.status is RankStatus.EXPANDING and not rank.release_when_applied
    check_warm(sched)
    rank.gpus = (2,)
    with pytest.raises(InvariantViolation, match="woken ahead on GPUs \\[2\\], not all of its home"):
        check_warm(sched)


def test_a_rank_woken_for_an_owner_back_for_training_instead_is_released_once_loaded() -> None:
    """O is woken ahead at 58 but comes back at 58.5 with a training request on GPUs 0-1: its
    two loading ranks are to be released once loaded, and the grant waits for those offloads."""
    driver = two_homes(PolicyConfig(loan_payback=1.0))
    at(driver, 56.25)
    assert driver.send(Tick(58.0)) == ["expand O0", "expand O1"]
    lines = driver.send(ClusterRequested(58.5, "O", "actor_train", Priority.ACTOR_TRAIN))
    assert lines == ["hold O/actor_train: GPU 0 is being loaded by O rank 0"]
    assert all(r.release_when_applied for r in driver.sched.pipelines["O"].active.values())
    driver.apply_all()
    assert statuses(driver, "O") == {}
    assert "actor_train" in driver.sched.pipelines["O"].holdings
