"""Warm ranks (rlix.policy.warm): a pipeline's rollout ranks stay loaded between its rollouts
while no one needs their GPUs. Golden runs worked out by hand, and a hypothesis property."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlix.policy import (
    ClusterReleased,
    ClusterReleasedAndRequested,
    ClusterRequested,
    ClusterSpec,
    InvariantViolation,
    PipelineKind,
    PipelineRegistered,
    PipelineSpec,
    PolicyConfig,
    Priority,
    Topology,
)
from rlix.policy.invariants_loans import check_warm
from rlix.policy.state import RankStatus
from tests.policy.drive import Driver
from tests.policy.test_look_ahead import at, spec


def homeless(pid: str, rollout: tuple[int, ...], train: tuple[int, ...] = ()) -> PipelineSpec:
    """No home: rolls out on `rollout`, trains on `train` (if given)."""
    clusters = {"actor_infer": ClusterSpec(1, rollout)}
    if train:
        clusters["actor_train"] = ClusterSpec(1, train)
    return PipelineSpec(pid, PipelineKind.FULL_FINETUNE, clusters)


def a_trains(config: PolicyConfig | None = None, policy: str = "rlix") -> tuple[Driver, list[str]]:
    """A at home on GPUs 0-1 may roll out on 0-3; B at home on GPU 2 only (GPU 3 is no one's
    home). A rolls out on all four, then trains on 0-1: the decisions of that round."""
    driver = Driver(Topology(1, 4), config, policy)
    driver.add(spec("A", (0, 1), (0, 1, 2, 3)), spec("B", (2,), (2,)))
    driver.send(ClusterRequested(0.0, "A", "actor_infer", Priority.ROLLOUT, 100.0))
    at(driver, 2.0)
    lines = driver.send(ClusterReleasedAndRequested(10.0, "A", "actor_infer", "actor_train", Priority.ACTOR_TRAIN))
    return driver, lines


def test_a_rank_no_one_needs_stays_loaded_through_training() -> None:
    driver, lines = a_trains()
    # GPUs 0-1: the training takes them. GPU 2: B's home, whose gangs A cannot foresee.
    # GPU 3: no one's home and no one asks for it, so A's rank 3 stays loaded.
    assert lines == ["shrink A0 release", "shrink A1 release", "shrink A2 release",
                     "grant A/actor_train [0, 1]"]
    a = driver.sched.pipelines["A"]
    assert list(a.active) == [3] and a.active[3].status is RankStatus.ACTIVE
    at(driver, 11.0)
    driver.send(ClusterReleased(20.0, "A", "actor_train"))
    # The next rollout starts on the warm rank (the Publish in between synced it): only the
    # ranks it left are loaded again.
    assert driver.send(ClusterRequested(30.0, "A", "actor_infer", Priority.ROLLOUT, 100.0)) == [
        "expand A0", "expand A1", "expand A2"]


def test_without_warm_ranks_or_under_another_policy_every_rank_is_released() -> None:
    expected = ["shrink A0 release", "shrink A1 release", "shrink A2 release", "shrink A3 release",
                "grant A/actor_train [0, 1]"]
    assert a_trains(PolicyConfig(keep_warm=False))[1] == expected
    assert a_trains(policy="gap-ratio")[1] == expected


def test_a_warm_rank_is_released_as_soon_as_a_rolling_pipeline_can_use_its_gpu() -> None:
    driver, _ = a_trains()
    at(driver, 11.0)
    # C may roll out on GPU 3 only: its request releases A's warm rank and C is lent GPU 3.
    driver.add(homeless("C", (3,)))
    assert driver.send(ClusterRequested(12.0, "C", "actor_infer", Priority.ROLLOUT, 10.0)) == [
        "shrink A3 release", "expand C0"]  # C's rank 0 is on GPU 3


def test_a_request_on_a_warm_gpu_releases_it_without_a_drain() -> None:
    driver, _ = a_trains(PolicyConfig(max_drain_s=4.0))
    at(driver, 11.0)
    # E (no home) trains on GPU 3: the warm rank is released (not preempted: it runs
    # nothing to drain) in the round of E's request, and the grant waits for it.
    driver.add(homeless("E", (3,), (3,)))
    lines = driver.send(ClusterRequested(12.0, "E", "actor_train", Priority.ACTOR_TRAIN))
    assert lines == ["shrink A3 release", "grant E/actor_train [3]"]
    assert next(iter(driver.outstanding.values())).drain_s == 0.0


def test_a_home_placed_on_a_warm_gpu_releases_it() -> None:
    driver, _ = a_trains()
    at(driver, 11.0)
    # D's home covers GPU 3 from its registration on: its gangs may come at any time.
    assert driver.send(PipelineRegistered(12.0, spec("D", (3,), (3,)))) == ["shrink A3 release"]


@settings(max_examples=40, deadline=None)
@given(
    pool=st.lists(st.integers(0, 5), min_size=1, max_size=6, unique=True),
    other_home=st.lists(st.integers(0, 5), max_size=3, unique=True),
    wanted=st.booleans(),
)
def test_warm_ranks_hold_only_gpus_no_one_else_covers_or_wants(
    pool: list[int], other_home: list[int], wanted: bool
) -> None:
    """After A's rollout ends, a rank of A stays loaded exactly on GPUs outside its training,
    outside every other home, and outside what a rolling pipeline may use; computed here
    from the specs, GPU by GPU."""
    home = (0,)
    driver = Driver(Topology(1, 6))
    driver.add(spec("A", home, tuple(pool)))
    if other_home:
        driver.add(spec("B", tuple(other_home), tuple(other_home)))
    if wanted:
        driver.add(homeless("W", (5,)))
    driver.send(ClusterRequested(0.0, "A", "actor_infer", Priority.ROLLOUT, 100.0))
    at(driver, 2.0)
    loaded = {r.gpus[0] for r in driver.sched.pipelines["A"].active.values()}
    if wanted:
        driver.send(ClusterRequested(3.0, "W", "actor_infer", Priority.ROLLOUT, 100.0))
        at(driver, 4.0)
    loaded = {r.gpus[0] for r in driver.sched.pipelines["A"].active.values()}
    driver.send(ClusterReleasedAndRequested(10.0, "A", "actor_infer", "actor_train", Priority.ACTOR_TRAIN))
    at(driver, 11.0)
    warm = {r.gpus[0] for r in driver.sched.pipelines["A"].active.values()}
    expected = {g for g in loaded if g not in home and g not in other_home and not (wanted and g == 5)}
    assert warm == expected


def test_the_warm_check_sees_a_rank_left_on_another_home() -> None:
    """The invariant check (invariants_loans.check_warm) passes on the state the core reached
    and fails once A's rank on B's home GPU 2 is marked loaded, as a core keeping it would."""
    driver, _ = a_trains()
    at(driver, 11.0)
    sched = driver.sched
    check_warm(sched)
    rank = next(r for r in sched.pipelines["A"].ranks if r.gpus == (2,))
    assert rank.status is RankStatus.INACTIVE
    rank.status = RankStatus.ACTIVE
    with pytest.raises(InvariantViolation, match="stays warm on GPU 2, home of B"):
        check_warm(sched)
