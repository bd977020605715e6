"""A job in training yields (rlix.policy.training_yields), by hand: its split weight is half
its finish weight while a training cluster of it is held or requested, and a job with
rollout work and no rank takes its bundle on GPUs no home covers when it weighs at least
three times as much; a holder not in training, or not light enough, keeps it, and nothing moves
with the rule or finishing together off.

The pool: one node of 8 GPUs. A, B and C all have their home (and training) on GPUs 0-3, so
GPUs 4-7 are covered by no home. B's rollout may use only GPUs 4-5 and C's only 6-7, A's any
GPU, all at TP 2. Time left (rlix.policy.finish): A 800 s (versions at 100 and 200 s of 10),
C the same unless said, B 240 s (period 60 s, at version 6). Gamma 2: A weighs 1 and B
(240 / 800) ** 2 = 0.09."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from rlix.policy import (
    ClusterRequested,
    ClusterSpec,
    Expand,
    PipelineKind,
    PipelineSpec,
    PolicyConfig,
    Priority,
    Scheduler,
    Shrink,
    Topology,
    TrainStepFinished,
    rollout,
    training_yields,
)
from rlix.policy.state import PipelineState, Rank, RankStatus
from rlix.policy.training_yields import TRAINING_WEIGHT, in_training
from tests.policy.drive import Driver

HOME = (0, 1, 2, 3)
B_WEIGHT = (240.0 / 800.0) ** 2


def spec(pid: str, rollout_gpus: tuple[int, ...]) -> PipelineSpec:
    clusters = {"actor_train": ClusterSpec(1, HOME), "actor_infer": ClusterSpec(2, rollout_gpus)}
    return PipelineSpec(pid, PipelineKind.FULL_FINETUNE, clusters, home=HOME, num_steps=10, max_staleness=1)


def versions(driver: Driver, times: dict[str, list[float]]) -> None:
    events = sorted((t, pid, v) for pid, ts in times.items() for v, t in enumerate(ts, start=1))
    for t, pid, version in events:
        driver.send(TrainStepFinished(t, pid, version))


def pool(config: PolicyConfig, trainer: str = "B", c_times: tuple[float, ...] = (100.0, 200.0)) -> Driver:
    """B holds GPUs 4-5 and C 6-7 for their rollouts; then `trainer` is granted its training
    cluster (GPUs 0-3) at 301 s, and A asks for rollout at 302 s, with GPUs 0-3 taken and
    4-7 held: the split's one-bundle minimums do not all fit, and holders keep theirs."""
    driver = Driver(Topology(1, 8), config)
    driver.add(spec("A", tuple(range(8))), spec("B", (4, 5)), spec("C", (6, 7)))
    short = [0.0, 20.0, 120.0, 140.0, 160.0, 300.0]
    versions(driver, {"A": [100.0, 200.0], "B": short, "C": list(c_times)})
    for pid in "BC":
        driver.send(ClusterRequested(300.0, pid, "actor_infer", Priority.ROLLOUT, 100.0))
    driver.apply_all()
    assert (driver.held("B"), driver.held("C")) == (2, 2)
    driver.send(ClusterRequested(301.0, trainer, "actor_train", Priority.ACTOR_TRAIN, 0.0))
    driver.apply_all()
    assert in_training(driver.sched.pipelines[trainer])
    driver.send(ClusterRequested(302.0, "A", "actor_infer", Priority.ROLLOUT, 100.0))
    return driver


def moves(driver: Driver) -> list[tuple[str, str, tuple[int, ...]]]:
    """The outstanding rank moves: (Shrink or Expand, pipeline, GPUs)."""
    return sorted((type(d).__name__, d.pipeline_id, d.gpus) for d in driver.outstanding.values()
                  if isinstance(d, Shrink | Expand))


GAMMA_2 = PolicyConfig(finish_together=2.0)


def test_a_job_in_training_weighs_half_its_finish_weight() -> None:
    driver = pool(GAMMA_2)
    weights = {pid: p.split_weight for pid, p in driver.sched.pipelines.items()}
    # B's training holds GPUs 0-3; A and C are not in training.
    assert weights == pytest.approx({"A": 1.0, "B": B_WEIGHT * TRAINING_WEIGHT, "C": 1.0})


def test_a_job_with_no_rank_takes_the_uncovered_bundle_of_a_light_job_in_training() -> None:
    """A weighs 1, B 0.045 in training: 3 x 0.045 <= 1, so B's rank on 4-5 is handed to A
    (a rebalance), and C, not in training, keeps 6-7."""
    driver = pool(GAMMA_2)
    assert moves(driver) == [("Expand", "A", (4, 5)), ("Shrink", "B", (4, 5))]
    shrink = next(d for d in driver.outstanding.values() if isinstance(d, Shrink))
    assert shrink.reason == "rebalance"
    driver.apply_all()
    assert (driver.held("A"), driver.held("B"), driver.held("C")) == (2, 0, 2)


def test_a_light_holder_not_in_training_keeps_its_bundle() -> None:
    """C's time left is 880 s (period 110 s), the longest, and C trains instead of B: C weighs
    1 x 0.5, A (800 / 880) ** 2 = 0.83 and B the floor, 0.08 ((240 / 880) ** 2 = 0.07 is below
    it). B is light enough but not in training, C in training but too heavy (3 x 0.5 > 0.83):
    A waits, as the one-bundle minimum keeps the holders' bundles."""
    driver = pool(GAMMA_2, trainer="C", c_times=(100.0, 210.0))
    weights = {pid: p.split_weight for pid, p in driver.sched.pipelines.items()}
    assert weights == pytest.approx({"A": (800.0 / 880.0) ** 2, "B": 0.08, "C": 0.5})
    assert moves(driver) == []
    assert driver.held("A") == 0


def test_a_holder_in_training_weighing_more_than_a_third_of_the_taker_keeps_its_bundle() -> None:
    """B's time left is 880 s (period 110 s, at version 2), the longest: B weighs 1, 0.5 in
    training, and A and C (800 / 880) ** 2 = 0.83. 3 x 0.5 > 0.83, so A gets nothing."""
    heavy = Driver(Topology(1, 8), GAMMA_2)
    heavy.add(spec("A", tuple(range(8))), spec("B", (4, 5)), spec("C", (6, 7)))
    versions(heavy, {"A": [100.0, 200.0], "B": [100.0, 210.0], "C": [100.0, 200.0]})
    for pid in "BC":
        heavy.send(ClusterRequested(300.0, pid, "actor_infer", Priority.ROLLOUT, 100.0))
    heavy.apply_all()
    heavy.send(ClusterRequested(301.0, "B", "actor_train", Priority.ACTOR_TRAIN, 0.0))
    heavy.apply_all()
    heavy.send(ClusterRequested(302.0, "A", "actor_infer", Priority.ROLLOUT, 100.0))
    weights = {pid: p.split_weight for pid, p in heavy.sched.pipelines.items()}
    assert weights == pytest.approx({"A": (800.0 / 880.0) ** 2, "B": 0.5, "C": (800.0 / 880.0) ** 2})
    assert moves(heavy) == []


@pytest.mark.parametrize("config", [PolicyConfig(finish_together=2.0, training_yields=False),
                                    PolicyConfig(finish_together=0.0)])
def test_nothing_yields_with_the_rule_or_finishing_together_off(config: PolicyConfig) -> None:
    driver = pool(config)
    assert moves(driver) == []
    weights = {pid: p.split_weight for pid, p in driver.sched.pipelines.items()}
    assert weights["B"] == (pytest.approx(B_WEIGHT) if config.finish_together else 1.0)


# --- the rule's contract under random pools (hypothesis) ---------------------------------------


def _uncovered(sched: Scheduler, gpus: tuple[int, ...]) -> bool:
    """No registered pipeline's home holds any of `gpus` (from the specs, not the core's
    coverage counts)."""
    return not any(set(gpus) & set(p.spec.home) for p in sched.pipelines.values())


def _eligible(sched: Scheduler, taker: PipelineState, victim: Rank) -> bool:
    """Whether rule 2 lets `taker` have `victim`'s bundle, all from the state (the split's
    targets of the round among it: the taker's gives it no bundle)."""
    now = sched.now
    holder = sched.pipelines[victim.pipeline_id]
    mine = taker.rank_by_slot.get(victim.slot)
    reserved = sched.reservations
    return (
        sched.targets.get(taker.pipeline_id, 0) < taker.tp
        and holder is not taker and victim.status is RankStatus.ACTIVE and victim.shrink_retry_after_s <= now
        and bool(holder.holdings or holder.pending) and _uncovered(sched, victim.gpus)
        and 3.0 * holder.split_weight <= taker.split_weight
        and mine is not None and mine.status is RankStatus.INACTIVE and mine.retry_after_s <= now
        and not any(reserved.blocks(g, taker.pipeline_id) for g in mine.gpus)
    )


def _checked(calls: list[int]) -> Callable[[Scheduler, list[PipelineState]], bool]:
    """rlix.policy.training_yields.hand_over_first_bundles, checked at each call: every bundle
    it moves goes from a job in training on GPUs no home covers, weighing at most a third, to a
    job with work and no rank; the heavier rank-less jobs first; and none is left that a
    rank-less job with work could take."""

    def check(sched: Scheduler, rollers: list[PipelineState]) -> bool:
        before = {p.pipeline_id: {r.slot: r for r in p.active.values()} for p in rollers}
        rankless = [p for p in rollers if p.demand > 0 and not p.active]
        offers = {(t.pipeline_id, r.slot) for t in rankless for p in rollers for r in p.active.values()
                  if _eligible(sched, t, r)}
        weight = {p.pipeline_id: p.split_weight for p in rollers}
        moved = original(sched, rollers)
        calls[0] += 1
        after = {p.pipeline_id: {r.slot for r in p.active.values()} for p in rollers}
        gained = {pid: after[pid] - set(before[pid]) for pid in after}
        assert moved == any(gained.values())
        for taker, slots in gained.items():
            for slot in slots:
                assert (taker, slot) in offers, f"{taker} took slot {slot}, which rule 2 does not offer it"
                assert len(slots) == 1  # one bundle, its first
                calls[1] += 1
                # Heavier rank-less jobs that could have had this bundle were served first.
                for other in rankless:
                    if (other.pipeline_id, slot) in offers and weight[other.pipeline_id] > weight[taker]:
                        assert gained[other.pipeline_id], f"{other.pipeline_id} outweighs {taker} yet got nothing"
        for taker in rollers:
            if taker.demand > 0 and not taker.active:
                left = [r for p in rollers for r in p.active.values() if _eligible(sched, taker, r)]
                assert not left, f"{taker.pipeline_id} has no rank, yet could take {left}"
        return moved

    return check


original = training_yields.hand_over_first_bundles


@st.composite
def pools(draw: st.DrawFn) -> tuple[int, list[PipelineSpec], dict[str, list[float]], list[str], list[str], list[str]]:
    """GPUs; 3-5 pipelines stacked on GPUs 0-3, each rolling out on some bundles no home covers
    (and its home, or not); their versions (time left: steps left x period); who rolls out
    first, which of those then train, and who asks for rollout last."""
    num_gpus = draw(st.sampled_from([8, 12]))
    bundles = [(g, g + 1) for g in range(4, num_gpus, 2)]
    num = draw(st.integers(3, 5))
    pids = [f"P{i}" for i in range(num)]
    specs, times = [], {}
    for pid in pids:
        chosen = draw(st.lists(st.sampled_from(bundles), min_size=1, unique=True))
        gpus = {g for b in chosen for g in b} | (set(HOME) if draw(st.booleans()) else set())
        specs.append(spec(pid, tuple(sorted(gpus))))
        period = draw(st.sampled_from([20.0, 60.0, 100.0, 110.0]))
        times[pid] = [10.0 + period * k for k in range(draw(st.integers(2, 9)))]
    first = draw(st.lists(st.sampled_from(pids), min_size=1, max_size=num - 1, unique=True))
    trainers = draw(st.lists(st.sampled_from(first), unique=True))
    last = [pid for pid in pids if pid not in first]
    return num_gpus, specs, times, first, trainers, last


@settings(max_examples=200, deadline=None)
@given(pool_=pools(), gamma=st.sampled_from([1.0, 2.0, 12.0]))
def test_rule_2_moves_only_what_it_offers_heaviest_first_and_leaves_nothing_it_offers(
    pool_: tuple[int, list[PipelineSpec], dict[str, list[float]], list[str], list[str], list[str]],
    gamma: float,
) -> None:
    num_gpus, specs, times, first, trainers, last = pool_
    calls = [0, 0]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rollout, "hand_over_first_bundles", _checked(calls))
        driver = Driver(Topology(1, num_gpus), PolicyConfig(finish_together=gamma))  # invariants checked
        driver.add(*specs)
        versions(driver, times)
        for pid in first:
            driver.send(ClusterRequested(1000.0, pid, "actor_infer", Priority.ROLLOUT, 100.0))
            driver.apply_all()
        for pid in trainers:
            driver.send(ClusterRequested(1001.0, pid, "actor_train", Priority.ACTOR_TRAIN, 0.0))
            driver.apply_all()
        for pid in last:
            driver.send(ClusterRequested(1002.0, pid, "actor_infer", Priority.ROLLOUT, 100.0))
            driver.apply_all()
    assert calls[0] > 0
    event("bundles handed over" if calls[1] else "none handed over")
