"""Spreading a tail (PolicyConfig.tail_spread_batch, rlix.policy.rollout.spreads): an on-policy
pipeline in its tail whose driver migrates running trajectories, with more than the batch of
them per busy rank, takes part in the split with its busy ranks as a floor; every other tail is
held at its busy ranks. A golden worked out by hand, each condition of the rule switched off in
turn, and random workloads with packed ranks driven to the end under the invariant checker."""

from __future__ import annotations

import dataclasses
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
    SpecError,
    Tick,
    Topology,
)
from tests.policy.drive import Driver
from tests.policy.test_liveness import workloads
from tests.policy.test_tail import WatchedLoop
from tests.policy.toy_driver import sequential_bound_s

EXAMPLES = int(os.environ.get("RLIX_HYPOTHESIS_EXAMPLES", "500")) // 5


def rollout_spec(pid: str, migrates: bool = True, staleness: int | dict[str, int] = 0) -> PipelineSpec:
    """Rollout on all 8 GPUs (TP 1); a staleness per adapter makes it a multi-LoRA pipeline."""
    if isinstance(staleness, dict):
        return PipelineSpec(pid, PipelineKind.MULTI_LORA, {"actor_infer": ClusterSpec(1, tuple(range(8)))},
                            adapters=tuple(staleness), max_staleness=staleness, rollout_migrates=migrates)
    return PipelineSpec(pid, PipelineKind.FULL_FINETUNE, {"actor_infer": ClusterSpec(1, tuple(range(8)))},
                        max_staleness=staleness, rollout_migrates=migrates)


def a_tail_then_b(config: PolicyConfig, migrates: bool = True, staleness: int | dict[str, int] = 0) -> Driver:
    """One node of 8. A rolls out alone on all 8 GPUs; at 2 s it has 60 units of work left, 40
    trajectories on each of ranks 0 and 1 and nothing queued (its tail); at 3 s B asks for
    rollout with 100 units."""
    driver = Driver(Topology(1, 8), dataclasses.replace(config, min_rebalance_interval_s=0.0))
    driver.add(rollout_spec("A", migrates, staleness), rollout_spec("B"))
    driver.send(ClusterRequested(1.0, "A", "actor_infer", Priority.ROLLOUT, 100.0))
    driver.apply_all()
    assert driver.held("A") == 8
    driver.send(RolloutProgressed(2.0, "A", 60.0))
    driver.send(RanksProgressed(2.0, "A", tuple((rank, 40 if rank < 2 else 0) for rank in range(8)), 0))
    driver.send(ClusterRequested(3.0, "B", "actor_infer", Priority.ROLLOUT, 100.0))
    return driver


@pytest.mark.parametrize("staleness", [0, {"a": 0, "b": 0}])
def test_by_hand_a_packed_on_policy_tail_takes_its_share_with_its_busy_ranks_a_floor(
    staleness: int | dict[str, int]
) -> None:
    # 80 trajectories on 2 busy ranks: 40 each > 32. By remaining work A gets 8 * 60/160 = 3
    # GPUs and B 5; A's floor (its 2 busy GPUs) is below its share.
    driver = a_tail_then_b(PolicyConfig(), staleness=staleness)
    assert driver.sched.targets == {"A": 3, "B": 5}
    driver.apply_all()
    assert driver.held("A") == 3 and driver.held("B") == 5
    assert {0, 1} <= set(driver.sched.pipelines["A"].active)  # the busy ranks stay


@pytest.mark.parametrize(("config", "migrates", "staleness"), [
    (PolicyConfig(tail_spread_batch=0), True, 0),   # the rule off
    (PolicyConfig(), False, 0),                     # a driver that does not migrate
    (PolicyConfig(), True, 1),                      # off-policy: its next rollout overlaps
    (PolicyConfig(), True, {"a": 0, "b": 1}),       # one adapter off-policy
    (PolicyConfig(tail_spread_batch=40), True, 0),  # 40 per busy rank is not more than 40
])
def test_every_other_tail_is_held_at_its_busy_ranks(
    config: PolicyConfig, migrates: bool, staleness: int | dict[str, int]
) -> None:
    driver = a_tail_then_b(config, migrates, staleness)
    assert driver.sched.targets == {"A": 2, "B": 6}
    driver.apply_all()
    assert sorted(driver.sched.pipelines["A"].active) == [0, 1]


@pytest.mark.parametrize("bad", [-1, 1.5, True, "32"])
def test_a_bad_batch_is_refused(bad: object) -> None:
    with pytest.raises(SpecError, match="tail_spread_batch"):
        Scheduler(Topology(1, 8), "rlix", PolicyConfig(tail_spread_batch=bad))  # type: ignore[arg-type]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload=workloads(), per_rank=st.integers(1, 6), batch=st.integers(0, 3))
def test_spreading_tails_finish_under_the_invariant_checker(workload: tuple, per_rank: int, batch: int) -> None:
    """Every pipeline migrates and ranks run up to `per_rank` trajectories each, so tails
    spread whenever more than `batch` run per busy rank. The invariants hold, every pipeline
    finishes, and a tail the core holds is still never lent a rank nor cut on a busy one
    (WatchedLoop's checks, which hold for any tail whose target is its busy GPUs)."""
    topology, jobs = workload
    for job in jobs:
        job.spec = dataclasses.replace(job.spec, rollout_migrates=True)
    sched = Scheduler(topology, "rlix", PolicyConfig(tail_spread_batch=batch), check_invariants=True)
    loop = WatchedLoop(sched, jobs, report_ranks=True, per_rank=per_rank)
    finished = loop.run(max_time_s=sequential_bound_s(jobs))
    assert set(finished) == {j.pipeline_id for j in jobs}


@pytest.mark.parametrize(("tail_s", "spread"), [(10.0, False), (30.0, True)])
def test_a_tail_spreads_only_while_its_tails_last_long_enough_to_pay_for_a_load(tail_s: float, spread: bool) -> None:
    """A's ranks load in 2 s (emitted at 0, applied at 2) and its first tail lasts `tail_s`.
    Its offload is not measured (its ranks stay warm), so a new rank pays when a tail lasts
    more than (1 + loan_payback 8) x 2 s = 18 s: the next tail holds at its busy ranks after
    a 10-s tail and spreads after a 30-s one, as in the golden above."""
    driver = Driver(Topology(1, 8), PolicyConfig(min_rebalance_interval_s=0.0))
    driver.add(rollout_spec("A"), rollout_spec("B"))
    driver.send(ClusterRequested(0.0, "A", "actor_infer", Priority.ROLLOUT, 100.0))
    driver.send(Tick(2.0))
    driver.apply_all()
    a = driver.sched.pipelines["A"]
    assert a.load_s == 2.0
    driver.send(RanksProgressed(3.0, "A", tuple((rank, 1) for rank in range(8)), 0))  # its tail
    driver.send(ClusterReleased(3.0 + tail_s, "A", "actor_infer"))
    assert a.tail_s == tail_s and a.offload_s != a.offload_s
    start = 4.0 + tail_s
    driver.send(ClusterRequested(start, "A", "actor_infer", Priority.ROLLOUT, 100.0))
    assert driver.held("A") == 8  # warm: no load
    driver.send(RolloutProgressed(start + 1.0, "A", 60.0))
    driver.send(RanksProgressed(start + 1.0, "A", tuple((rank, 40 if rank < 2 else 0) for rank in range(8)), 0))
    driver.send(ClusterRequested(start + 2.0, "B", "actor_infer", Priority.ROLLOUT, 100.0))
    assert driver.sched.targets == ({"A": 3, "B": 5} if spread else {"A": 2, "B": 6})
