"""The CPU-work model of live runs on CPU-declared GPUs (rlix.sim.cpu_work): what a config
starts and trains, counted from its scenario; the fit recovering known constants and refusing
runs it cannot tell apart; the makespan it predicts, worked out by hand; and the simulator
rescaled until it matches that makespan (rlix.studies.fidelity.predict_cpu_bound)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlix.sim.cpu_work import (
    cpu_bound_makespan_s,
    fit_cpu_work,
    run_sample,
    steps_trained,
    workers_started,
)
from rlix.studies.fidelity import (
    SECOND_CALIBRATION,
    VARIANTS,
    predict_cpu_bound,
    run_sim,
    scenario_data,
)


def test_workers_and_steps_of_the_fidelity_configs() -> None:
    # cpu-demo: ft's rollout maps 4 GPUs (TP 1) and lora's too; under static each keeps the 2
    # bundles of its home; two-gpus maps 2 each, three-gpus 3 each, a third pipeline 4 more.
    counts = {name: workers_started(scenario_data(variant))
              for name, variant in {"cpu-demo": None, **VARIANTS, **SECOND_CALIBRATION}.items()}
    assert counts == {"cpu-demo": 8, "pipeline-added": 12, "two-gpus": 4, "staleness-1": 8, "static": 4,
                      "three-gpus": 6}
    # ft's 12 steps and 12 for each of lora's two adapters; the added pipeline trains 12 more.
    assert steps_trained(scenario_data(None)) == 36
    assert steps_trained(scenario_data(VARIANTS["pipeline-added"])) == 48
    assert steps_trained(scenario_data(None, steps=3)) == 9


def _sample(steps: float, workers: float, per_step: float = 1.2, per_worker: float = 4.7,
            busy: float = 0.98) -> dict[str, float]:
    return {"own_cpu_s": per_step * steps + per_worker * workers, "own_cores": 1.85, "busy_share": busy,
            "lead_s": 1.7, "steps": steps, "workers": workers}


def test_the_fit_recovers_known_constants() -> None:
    fit = fit_cpu_work([_sample(36, 8), _sample(36, 6), _sample(48, 12)])
    assert fit["fitted"]
    assert fit["cpu_per_step_s"] == pytest.approx(1.2) and fit["cpu_per_worker_s"] == pytest.approx(4.7)
    assert fit["cores"] == pytest.approx(1.85) and fit["lead_s"] == pytest.approx(1.7)
    assert fit["rms_cpu_s"] == pytest.approx(0.0, abs=1e-9)


def test_the_workers_own_readings_make_one_run_enough() -> None:
    """Measured: the per-worker CPU is the mean of the workers' readings, the per-step CPU what
    is left of the run's; runs that would not tell the two apart by regression are fine."""
    run = {**_sample(36, 8), "worker_start_cpu_s": 8 * 4.7}
    fit = fit_cpu_work([run])
    assert fit["fitted"] and fit["source"] == "measured starts"
    assert fit["cpu_per_worker_s"] == pytest.approx(4.7) and fit["cpu_per_step_s"] == pytest.approx(1.2)
    assert fit["cpu_per_load_s"] == 0.0 and fit["idle_cores_per_worker"] == 0.0
    # Two runs, one worker count per step between them: pooled the same way.
    two = fit_cpu_work([run, {**_sample(72, 16), "worker_start_cpu_s": 16 * 5.0}])
    assert two["cpu_per_worker_s"] == pytest.approx((8 * 4.7 + 16 * 5.0) / 24)
    # One run without readings: back to the regression, which cannot tell them apart.
    assert not fit_cpu_work([run, _sample(72, 16)])["fitted"]


def test_multi_lora_workers_get_their_own_start_cost() -> None:
    """A multi-LoRA pipeline's workers also import the adapter library: with both kinds started
    and each reading saying whose it is, each kind's mean; with one kind, one figure."""
    run = {**_sample(36, 8, per_worker=0.0), "worker_start_cpu_s": 4 * 3.0 + 4 * 5.5,
           "workers_multi_lora": 4.0, "worker_start_cpu_multi_lora_s": 4 * 5.5}
    run["own_cpu_s"] += run["worker_start_cpu_s"]
    fit = fit_cpu_work([run])
    assert fit["cpu_per_worker_s"] == pytest.approx(3.0) and fit["cpu_per_worker_multi_lora_s"] == pytest.approx(5.5)
    assert fit["cpu_per_step_s"] == pytest.approx(1.2)
    pooled = fit_cpu_work([{**run, "workers_multi_lora": 0.0, "worker_start_cpu_multi_lora_s": 0.0}])
    assert pooled["cpu_per_worker_s"] == pytest.approx(4.25) and "cpu_per_worker_multi_lora_s" not in pooled
    # two-gpus starts 2 workers of each kind: (43.2 + 2 * 3.0 + 2 * 5.5) / 2 - 1.5 = 28.6 s.
    by_kind = {"cpu_per_step_s": 1.2, "cpu_per_worker_s": 3.0, "cpu_per_worker_multi_lora_s": 5.5,
               "cores": 2.0, "lead_s": 1.5}
    assert cpu_bound_makespan_s(by_kind, scenario_data(VARIANTS["two-gpus"])) == pytest.approx(28.6)


def test_the_workers_accounts_split_the_rest() -> None:
    """With the workers' accounts, their weight moves give the per-load CPU, their idle CPU over
    the time they were up the idle cores per worker, and the per-step CPU is what is left:
    known figures put together by hand come back out."""
    loads, alive = 70.0, 8 * 45.0  # 8 workers up 45 s each
    run = {**_sample(36, 8), "worker_start_cpu_s": 8 * 4.7, "moves_cpu_s": 0.25 * loads, "loads": loads,
           "idle_cpu_s": 0.05 * alive, "alive_s": alive}
    run["own_cpu_s"] += 0.25 * loads + 0.05 * alive
    fit = fit_cpu_work([run])
    assert fit["source"] == "measured"
    assert fit["cpu_per_load_s"] == pytest.approx(0.25) and fit["idle_cores_per_worker"] == pytest.approx(0.05)
    assert fit["cpu_per_step_s"] == pytest.approx(1.2) and fit["cpu_per_worker_s"] == pytest.approx(4.7)


def test_the_fit_keeps_its_constants_non_negative() -> None:
    # More workers and less CPU: unconstrained, the per-worker cost would be negative.
    fit = fit_cpu_work([{**_sample(36, 8), "own_cpu_s": 60.0}, {**_sample(36, 4), "own_cpu_s": 70.0}])
    assert fit["fitted"] and fit["cpu_per_worker_s"] == 0.0 and fit["cpu_per_step_s"] > 0


def test_the_fit_refuses_what_it_cannot_tell() -> None:
    one_ratio = fit_cpu_work([_sample(36, 8), _sample(72, 16)])
    assert not one_ratio["fitted"] and "workers per step" in one_ratio["reason"]
    idle = fit_cpu_work([_sample(36, 8), _sample(36, 4, busy=0.7)])
    assert not idle["fitted"] and "not bound by CPU" in idle["reason"]
    assert not fit_cpu_work([])["fitted"]


def test_the_makespan_it_predicts_by_hand() -> None:
    fit = {"cpu_per_step_s": 1.2, "cpu_per_worker_s": 4.7, "cores": 2.0, "lead_s": 1.5}
    # two-gpus: 36 steps and 4 workers: (43.2 + 18.8) / 2 - 1.5 = 29.5 s.
    assert cpu_bound_makespan_s(fit, scenario_data(VARIANTS["two-gpus"])) == pytest.approx(29.5)
    # With 40 loads at 0.25 CPU-s and 4 workers taking 0.05 of a core each while up:
    # (43.2 + 18.8 + 10) / (2 - 0.2) - 1.5 = 38.5 s.
    accounted = {**fit, "cpu_per_load_s": 0.25, "idle_cores_per_worker": 0.05}
    assert cpu_bound_makespan_s(accounted, scenario_data(VARIANTS["two-gpus"]), 40) == pytest.approx(38.5)


def test_a_run_folder_without_cpu_work_is_refused(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"makespan_s": 10.0, "machine": {"cores": 2}}))
    with pytest.raises(ValueError, match="lacks own_cpu_s"):
        run_sample(tmp_path, scenario_data(None))
    (tmp_path / "summary.json").write_text(json.dumps({"makespan_s": 10.0, "machine": {
        "own_cpu_s": 30.0, "own_cores": 1.5, "machine_busy_share": 0.95, "wall_s": 12.0}}))
    assert run_sample(tmp_path, scenario_data(None)) == {
        "own_cpu_s": 30.0, "own_cores": 1.5, "busy_share": 0.95, "lead_s": 2.0, "steps": 36.0, "workers": 8.0}
    # With the workers' own readings, their count is the workers the run started.
    (tmp_path / "summary.json").write_text(json.dumps({"makespan_s": 10.0, "machine": {
        "own_cpu_s": 30.0, "own_cores": 1.5, "machine_busy_share": 0.95, "wall_s": 12.0,
        "worker_start_cpu_s": [2.0, 2.5, 3.0]}}))
    sample = run_sample(tmp_path, scenario_data(None))
    assert sample["workers"] == 3.0 and sample["worker_start_cpu_s"] == pytest.approx(7.5)
    assert "idle_cpu_s" not in sample
    # Readings that say whose they are: the multi-LoRA pipeline's apart.
    starts = [{"pipeline_id": pid, "dp_rank": 0, "cpu_s": cpu_s} for pid, cpu_s in (("ft", 2.0), ("lora", 5.0))]
    (tmp_path / "summary.json").write_text(json.dumps({"makespan_s": 10.0, "machine": {
        "own_cpu_s": 30.0, "own_cores": 1.5, "machine_busy_share": 0.95, "wall_s": 12.0,
        "worker_start_cpu_s": [2.0, 5.0], "worker_starts": starts}}))
    sample = run_sample(tmp_path, scenario_data(None))
    assert sample["workers_multi_lora"] == 1.0 and sample["worker_start_cpu_multi_lora_s"] == 5.0
    # And their accounts at the end: idle is what the start, moves and generation leave.
    account = {"start_s": 2.0, "moves_s": 1.0, "wakes": 4.0, "generate_s": 3.0, "total_s": 7.0, "alive_s": 20.0}
    (tmp_path / "summary.json").write_text(json.dumps({"makespan_s": 10.0, "machine": {
        "own_cpu_s": 30.0, "own_cores": 1.5, "machine_busy_share": 0.95, "wall_s": 12.0,
        "worker_start_cpu_s": [2.0, 2.0], "worker_cpu": [account, account]}}))
    sample = run_sample(tmp_path, scenario_data(None))
    assert sample["loads"] == 8.0 and sample["moves_cpu_s"] == 2.0
    assert sample["idle_cpu_s"] == pytest.approx(2.0) and sample["alive_s"] == 40.0


def test_the_simulator_is_rescaled_to_the_cpu_bound_makespan(tmp_path: Path) -> None:
    """A target 30% below the first run's makespan: the runs made scale the op constants down,
    and the run kept is the one nearest the target (nearer than the first)."""
    from rlix.scenarios.costs import CostsFile

    costs = CostsFile(costs={"load_s": 0.2, "offload_s": 0.3, "train_fixed_s": 0.3, "forward_fixed_s": 0.1,
                             "decode_iteration_s": 0.01})
    variant = VARIANTS["two-gpus"]
    first = run_sim(scenario_data(variant, None, dict(costs.costs), steps=3), tmp_path / "first")
    made = json.loads((first / "summary.json").read_text())["makespan_s"]
    data = scenario_data(variant, steps=3)
    target = 0.7 * made
    # A fit whose CPU-bound makespan for this config is `target`: per-step work only, one core.
    fit = {"cpu_per_step_s": target / steps_trained(data), "cpu_per_worker_s": 0.0, "cores": 1.0, "lead_s": 0.0}
    kept, factors = predict_cpu_bound(variant, tmp_path, costs, fit, None, 3, first)
    kept_s = json.loads((kept / "summary.json").read_text())["makespan_s"]
    assert len(factors) >= 2 and all(f < 1.0 for f in factors[1:])
    assert abs(kept_s - target) < abs(made - target)
    assert abs(kept_s - target) <= 0.1 * target
