"""bench/fluid_allocation.py: the fluid programme's makespan on inputs checked by hand, and on
one seed of agentic-4x32 that no on-policy job beats its own chain alone with the whole pool."""

from __future__ import annotations

import pytest

from tests.bench.bench_module import load


def _job(pipeline_id: str, arrival_s: float, on_policy: bool, alone_s: dict[int, float],
         rollout_s: dict[int, float] | None = None, home_s: float = 0.0, off_gpu_s: float = 0.0) -> object:
    fluid = load("fluid_allocation")
    return fluid.Job(pipeline_id, arrival_s, on_policy, 8, alone_s, rollout_s or {}, home_s, off_gpu_s)


def test_one_on_policy_job_alone_takes_its_chain_on_the_most_gpus() -> None:
    fluid = load("fluid_allocation")
    # 10 s training on its 8 GPUs, 5 s off them, rollouts 100 s on 8 GPUs or 60 s on 16.
    job = _job("a", 0.0, True, {8: 115.0, 16: 75.0}, {8: 100.0, 16: 60.0}, home_s=10.0, off_gpu_s=5.0)
    assert fluid.fluid_makespan_s([job], 16) == pytest.approx(75.0)
    late = _job("a", 40.0, True, {8: 115.0, 16: 75.0}, {8: 100.0, 16: 60.0}, home_s=10.0, off_gpu_s=5.0)
    assert fluid.fluid_makespan_s([late], 16) == pytest.approx(115.0)


def test_two_off_policy_jobs_run_side_by_side_when_fewer_gpus_are_more_efficient() -> None:
    fluid = load("fluid_allocation")
    # Per GPU, 8 GPUs for 100 s (800 GPU-s) beats 16 for 60 s (960): both at 8 at once, 100 s;
    # one after the other on 16 would take 120 s.
    jobs = [_job("a", 0.0, False, {8: 100.0, 16: 60.0}), _job("b", 0.0, False, {8: 100.0, 16: 60.0})]
    assert fluid.fluid_makespan_s(jobs, 16) == pytest.approx(100.0)


def test_a_late_job_gets_the_pool_the_early_one_leaves() -> None:
    fluid = load("fluid_allocation")
    # a alone from 0 to 50 on 16 GPUs does 50/60 of its run; b arrives at 50. From then on, by
    # hand: a needs 1/6 of its run, b all of it; with a at 8 GPUs (x s) and b at 8 then at 16,
    # the best is a's rest at 8 GPUs beside b's start (100/6 s), then b alone on 16 for the rest
    # of its run: b does (100/6)/100 at 8, and 1 - 1/6 = 5/6 at 16 takes 50 s; 50 + 100/6 + 50.
    jobs = [_job("a", 0.0, False, {8: 100.0, 16: 60.0}), _job("b", 50.0, False, {8: 100.0, 16: 60.0})]
    assert fluid.fluid_makespan_s(jobs, 16) == pytest.approx(50.0 + 100.0 / 6 + 50.0)


def test_on_policy_jobs_give_their_rollout_gpus_back_while_they_train() -> None:
    fluid = load("fluid_allocation")
    # Two on-policy jobs on 24 GPUs: each trains 50 s on its 8 GPUs and rolls out 50 s on 16
    # GPUs (or 100 s on 8). One rolls out on 16 while the other trains on 8, then they swap:
    # 100 s, each job's own chain. Charged 16 GPUs throughout, they could not overlap at all.
    job = dict(alone_s={8: 150.0, 16: 100.0}, rollout_s={8: 100.0, 16: 50.0}, home_s=50.0)
    jobs = [_job("a", 0.0, True, **job), _job("b", 0.0, True, **job)]  # type: ignore[arg-type]
    assert fluid.fluid_makespan_s(jobs, 24) == pytest.approx(100.0)
    # On 16 GPUs the rollouts at 16 cannot overlap the other's training: at best both roll
    # out on 8 side by side (100 s) and train side by side (50 s).
    assert fluid.fluid_makespan_s(jobs, 16) == pytest.approx(150.0)


def test_agentic_seed_zero_is_under_the_ceiling_and_no_job_beats_its_chain() -> None:
    fluid = load("fluid_allocation")
    (row,) = fluid.bench("agentic-4x32", seeds=1, workers=1, quiet=True)
    assert row["critical_path_s"] <= row["fluid_makespan_s"]
    assert 0.5 < row["fluid_of_ceiling"] <= 1.0 and 0.5 < row["policy_of_ceiling"] <= 1.0
    assert row["policy_steps_per_h"] == pytest.approx(80 * 3600.0 / row["policy_makespan_s"], rel=1e-6)
