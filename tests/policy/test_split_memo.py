"""The rlix planner reuses the last round's split when the claims and the budget are the same
(`rlix.policy.rollout.compute_split`): never a stale one. Every round's targets here are
checked against the split worked out afresh from the pipelines' state, the claims built by
hand from the fields the split reads, and the memo must have been used where nothing changed."""

from __future__ import annotations

from rlix.policy import (
    ClusterRequested,
    Priority,
    RanksProgressed,
    RolloutProgressed,
    Tick,
    Topology,
)
from rlix.policy.split import Claim, split_rollout
from tests.policy.drive import Driver, rollout_only


def fresh_targets(driver: Driver) -> dict[str, int]:
    """The split of the rolling pipelines over all eight GPUs (nothing else holds any here)."""
    sched = driver.sched
    claims = [
        Claim(p.pipeline_id, p.demand, p.tp, p.split_weight, p.num_active_gpus, len(p.ranks), p.admitted_seq)
        for p in sched.pipelines.values() if p.rolling
    ]
    return split_rollout(claims, 8).targets


def test_targets_follow_every_change_and_an_unchanged_round_reuses_the_split() -> None:
    driver = Driver(Topology(1, 8))
    driver.add(rollout_only("P", 1), rollout_only("Q", 1))
    sched = driver.sched
    driver.send(ClusterRequested(0.0, "P", "actor_infer", Priority.ROLLOUT, 100.0))
    driver.send(ClusterRequested(0.0, "Q", "actor_infer", Priority.ROLLOUT, 100.0))
    driver.apply_all()
    assert sched.targets == fresh_targets(driver) == {"P": 4, "Q": 4}
    reused = 0
    now = 0.0
    for p_left, q_left in ((90, 30), (90, 30), (60, 30), (60, 5), (60, 5), (20, 5)):
        now += 1.0
        memo = sched.split_memo
        driver.send(RolloutProgressed(now, "P", float(p_left)))
        driver.send(RolloutProgressed(now, "Q", float(q_left)))
        driver.apply_all()
        assert sched.targets == fresh_targets(driver), (p_left, q_left)
        # A report of where the work runs (some still queued: no tail) changes no claim: the
        # same split, not worked out again.
        before = sched.split_memo
        driver.send(RanksProgressed(now, "Q", tuple((r, 1) for r in sched.pipelines["Q"].active), 1))
        assert sched.split_memo is before and sched.targets == fresh_targets(driver)
        reused += memo is sched.split_memo
    assert reused >= 2  # the repeated reports: nothing changed between them
    assert sched.targets == {"P": 6, "Q": 2}
    driver.send(Tick(now + 1.0))
    assert sched.targets == fresh_targets(driver)
