"""Finishing together (PolicyConfig.finish_together, rlix.policy.finish): the split weighs each
rolling pipeline by (projected time left / longest) ** gamma, at least finish_floor, and holds
no such pipeline's tail at its busy ranks. Time left worked out by hand from the versions'
times, the weights of a round, the split that follows through the core, a tail given up by
hand, and the spec's step counts checked and carried through the run record."""

from __future__ import annotations

import dataclasses

import pytest

from rlix.policy import (
    ClusterReleased,
    ClusterRequested,
    ClusterSpec,
    PipelineKind,
    PipelineSpec,
    PolicyConfig,
    Priority,
    RanksProgressed,
    RolloutProgressed,
    Scheduler,
    Shrink,
    SpecError,
    Topology,
    TrainStepFinished,
)
from rlix.policy.finish import time_left_s
from rlix.runs.codec import spec_from_dict, spec_to_dict
from tests.policy.drive import Driver


def spec(
    pid: str, num_steps: int | dict[str, int] | None, adapters: tuple[str, ...] = (), weight: float = 1.0
) -> PipelineSpec:
    """Rollout on all 8 GPUs of one node at TP 1."""
    kind = PipelineKind.MULTI_LORA if adapters else PipelineKind.FULL_FINETUNE
    return PipelineSpec(pid, kind, {"actor_infer": ClusterSpec(1, tuple(range(8)))}, adapters, weight=weight,
                        num_steps=num_steps)


def versions(driver: Driver, steps: dict[tuple[str, str | None], list[float]]) -> None:
    """New versions 1, 2, ... of each (pipeline, adapter) at its times, all in time order."""
    events = sorted(
        (t, pid, version, adapter)
        for (pid, adapter), times in steps.items()
        for version, t in enumerate(times, start=1)
    )
    for t, pid, version, adapter in events:
        driver.send(TrainStepFinished(t, pid, version, adapter))


def test_time_left_is_steps_left_times_the_mean_period_by_hand() -> None:
    driver = Driver(Topology(1, 8))
    driver.add(spec("A", 10), spec("B", None), spec("C", {"x": 4, "y": 9}, ("x", "y")))
    a, b, c = (driver.sched.pipelines[p] for p in "ABC")
    assert time_left_s(a) is None  # no version yet
    versions(driver, {("A", None): [100.0], ("C", "x"): [100.0, 120.0]})
    assert time_left_s(a) is None  # one version: no period
    assert time_left_s(c) is None  # y has no period yet
    driver.send(TrainStepFinished(400.0, "A", 2))
    driver.send(TrainStepFinished(550.0, "A", 3))
    # Period (550 - 100) / (3 - 1) = 225 s; 7 steps left.
    assert time_left_s(a) == pytest.approx(7 * 225.0)
    driver.send(TrainStepFinished(560.0, "B", 1))
    driver.send(TrainStepFinished(600.0, "B", 2))
    assert time_left_s(b) is None  # no step count
    # C: x at 100 and 120 (period 20, 2 left: 40 s), y at 600 and 700 (period 100, 7 left).
    driver.send(TrainStepFinished(600.0, "C", 1, "y"))
    driver.send(TrainStepFinished(700.0, "C", 2, "y"))
    assert time_left_s(c) == pytest.approx(7 * 100.0)
    # Past its count: nothing left, never negative.
    for version in range(4, 13):
        driver.send(TrainStepFinished(700.0 + version, "A", version))
    assert time_left_s(a) == 0.0


def three_rolling(gamma: float, weights: tuple[float, float, float] = (1.0, 1.0, 1.0)) -> Driver:
    """A (10 steps, period 100 s, at version 2: 800 s left), B (10 steps, period 60 s, at
    version 6: 240 s left) and C (no step count) ask for rollout with equal work at 300 s."""
    driver = Driver(Topology(1, 8), PolicyConfig(finish_together=gamma, min_rebalance_interval_s=0.0))
    driver.add(*(spec(pid, steps, weight=w) for pid, steps, w in zip("ABC", (10, 10, None), weights, strict=True)))
    versions(driver, {("A", None): [100.0, 200.0], ("B", None): [0.0, 20.0, 120.0, 140.0, 160.0, 300.0]})
    for pid in "ABC":
        driver.send(ClusterRequested(300.0, pid, "actor_infer", Priority.ROLLOUT, 100.0))
    return driver


def test_the_weights_of_a_round_by_hand() -> None:
    driver = three_rolling(2.0)
    weights = {pid: p.split_weight for pid, p in driver.sched.pipelines.items()}
    assert weights == pytest.approx({"A": 1.0, "B": (240.0 / 800.0) ** 2, "C": 1.0})


def test_the_factor_multiplies_the_specs_weight() -> None:
    driver = three_rolling(2.0, (0.5, 3.0, 2.0))
    weights = {pid: p.split_weight for pid, p in driver.sched.pipelines.items()}
    assert weights == pytest.approx({"A": 0.5, "B": 3.0 * (240.0 / 800.0) ** 2, "C": 2.0})


def test_the_floor_keeps_a_nearly_done_pipeline_in_the_split() -> None:
    driver = three_rolling(2.0)
    for version in range(7, 10):  # B at version 9: one step left, against A's 800 s
        driver.send(TrainStepFinished(300.0 + version, "B", version))
    b = driver.sched.pipelines["B"]
    period = (309.0 - 0.0) / 8
    assert time_left_s(b) == pytest.approx(period)
    floor = PolicyConfig().finish_floor
    assert (period / 800.0) ** 2 < floor
    assert b.split_weight == pytest.approx(floor)


def b_tail(driver: Driver, now: float) -> None:
    """B rolls out on all 8 GPUs of the node and reports its 6 trajectories left running one a
    rank on ranks 0-5, nothing queued: its tail."""
    driver.send(ClusterRequested(now, "B", "actor_infer", Priority.ROLLOUT, 100.0))
    driver.apply_all()
    assert driver.held("B") == 8
    driver.send(RolloutProgressed(now + 1.0, "B", 6))
    driver.send(RanksProgressed(now + 1.0, "B", tuple((rank, int(rank < 6)) for rank in range(8)), 0))


def tail_then_newcomer(b_steps: int | None, last_tail_s: float = 150.0) -> tuple[Driver, list[str]]:
    """B (10 steps, 240 s left, or no step count) has had one rollout whose tail lasted
    `last_tail_s`, and is in the tail of the next (b_tail); A (800 s left) then asks for
    rollout with as much work. Gamma 4: B weighs max(0.3 ** 4, floor). The no-reversal
    interval is the default 90 s; no rebalance went before to hold anything back."""
    driver = Driver(Topology(1, 8), PolicyConfig(finish_together=4.0))
    driver.add(spec("A", 10), spec("B", b_steps))
    versions(driver, {("A", None): [100.0, 200.0], ("B", None): [0.0, 20.0, 120.0, 140.0, 160.0, 300.0]})
    b_tail(driver, 300.0)
    driver.send(ClusterReleased(301.0 + last_tail_s, "B", "actor_infer"))
    driver.apply_all()
    assert driver.sched.pipelines["B"].tail_s == pytest.approx(last_tail_s)
    b_tail(driver, 400.0 + last_tail_s)
    lines = driver.send(ClusterRequested(402.0 + last_tail_s, "A", "actor_infer", Priority.ROLLOUT, 8.0))
    return driver, lines


def test_a_tail_weighed_by_its_time_left_gives_busy_ranks_to_the_job_that_ends_last() -> None:
    """By hand: weights 1 (A) and 0.08 (B) on equal work: A's share is 8 / 1.08 = 7.4 GPUs, so
    B keeps one bundle and gives its 2 idle ranks and 5 of its busy ones (re-queuing their
    trajectories)."""
    driver, _lines = tail_then_newcomer(10)
    b = driver.sched.pipelines["B"]
    assert not b.tail_held and b.split_weight == pytest.approx(0.08)
    assert driver.sched.targets == {"A": 7, "B": 1}
    cut = [d for d in driver.outstanding.values() if isinstance(d, Shrink) and d.pipeline_id == "B"]
    assert [d.dp_rank for d in cut] == [6, 7, 0, 1, 2, 3, 4]  # idle first, then the busy ones


@pytest.mark.parametrize(("b_steps", "last_tail_s"), [(None, 150.0), (10, 60.0)])
def test_a_tail_without_a_projection_or_long_tails_keeps_its_busy_ranks(
    b_steps: int | None, last_tail_s: float
) -> None:
    """B without a step count has no time left and keeps its spec's weight; B with tails
    shorter than the 90-s no-reversal interval is weighed, but its tail would end before a
    rebalance could move the ranks again. Either is held at its busy ranks (keep_busy_tail),
    giving A its 2 idle ones."""
    driver, _lines = tail_then_newcomer(b_steps, last_tail_s)
    b = driver.sched.pipelines["B"]
    assert b.tail_held
    assert b.split_weight == (1.0 if b_steps is None else pytest.approx(0.08))
    assert driver.sched.targets == {"A": 2, "B": 6}
    cut = [d for d in driver.outstanding.values() if isinstance(d, Shrink) and d.pipeline_id == "B"]
    assert sorted(d.dp_rank for d in cut) == [6, 7]


def test_the_split_follows_the_weights_through_the_core() -> None:
    """8 GPUs for three pipelines of equal work weighted 1 : 0.09 : 1: B's share (8 x 0.09 /
    2.09 = 0.34 GPUs) is below a bundle, so it gets its one-bundle minimum and A and C the rest."""
    driver = three_rolling(2.0)
    driver.apply_all()
    held = {pid: driver.held(pid) for pid in "ABC"}
    assert held == {"A": 4, "B": 1, "C": 3} or held == {"A": 3, "B": 1, "C": 4}


def test_off_the_weights_are_the_specs() -> None:
    driver = three_rolling(0.0)
    assert {p.split_weight for p in driver.sched.pipelines.values()} == {1.0}
    driver.apply_all()
    held = sorted(driver.held(pid) for pid in "ABC")
    assert held == [2, 3, 3]  # equal work: 8 / 3 each, rounded


@pytest.mark.parametrize("bad", [0, -1, 1.5, "4", {"x": 3}])
def test_a_bad_step_count_is_refused(bad: object) -> None:
    with pytest.raises(SpecError, match="num_steps"):
        spec("A", bad).validate(Topology(1, 8))  # type: ignore[arg-type]


def test_a_per_adapter_count_must_name_each_adapter() -> None:
    with pytest.raises(SpecError, match="num_steps"):
        spec("C", {"x": 3}, ("x", "y")).validate(Topology(1, 8))


@pytest.mark.parametrize("bad", [-1.0, float("inf"), float("nan"), "4"])
def test_a_bad_gamma_is_refused(bad: object) -> None:
    with pytest.raises(SpecError, match="finish_together"):
        Scheduler(Topology(1, 8), "rlix", PolicyConfig(finish_together=bad))  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, float("nan"), "0.1"])
def test_a_bad_floor_is_refused(bad: object) -> None:
    with pytest.raises(SpecError, match="finish_floor"):
        Scheduler(Topology(1, 8), "rlix", PolicyConfig(finish_together=4.0, finish_floor=bad))  # type: ignore[arg-type]


@pytest.mark.parametrize("num_steps", [None, 12, {"x": 3, "y": 5}])
def test_step_counts_round_trip_through_the_run_record(num_steps: int | dict[str, int] | None) -> None:
    adapters = ("x", "y") if isinstance(num_steps, dict) else ()
    original = spec("A", num_steps, adapters)
    data = spec_to_dict(original)
    assert ("num_steps" in data) == (num_steps is not None)
    assert spec_from_dict(data) == original
    assert dataclasses.replace(original, num_steps=None) == spec_from_dict({**data, "num_steps": None})
