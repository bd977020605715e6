"""A short live calibration and prediction: a small cpu-demo (two declared GPUs, 4 steps) runs on
the CPU executor, `rlix-sim calibrate` fits the simulator on its folder, and the calibrated
simulator, replaying the run's own rollout lengths, predicts the run (in sample: the unseen
configs are bench/fidelity.py's, minutes each). On a shared 2-core machine a live run varies by
tens of percent from one run to the next, so the bounds here are loose (makespan within 30%,
the mean step within 2x); the bench reports the errors themselves.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlix.executor.live import execute
from rlix.executor.run import plan
from rlix.scenarios.costs import read_costs_file
from rlix.scenarios.load import validate_scenario
from rlix.sim import simulate
from rlix.sim.cli import main
from tests.executor.demos import small_demo

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def live_run(ray_session: object, tmp_path_factory: pytest.TempPathFactory) -> Path:
    result = execute(plan(validate_scenario(small_demo())), out_dir=tmp_path_factory.mktemp("live") / "run",
                     quiet=True, timeout_s=600)
    assert result.finished and result.out_dir is not None
    return Path(result.out_dir)


def test_calibrates_on_a_live_run_and_predicts_it(live_run: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    costs, trace = tmp_path / "costs.yaml", tmp_path / "lengths.parquet"
    assert main(["calibrate", str(live_run), "--out", str(costs), "--trace-out", str(trace)]) == 0
    printed = capsys.readouterr().out
    for name in ("load_s", "offload_s", "launch_s", "init_s", "worker_start_s", "decode_per_sequence_s"):
        assert name in printed
    # the workers' starts, told from the init holdings that outlasted the trainers' inits
    assert read_costs_file(costs).costs["worker_start_s"] > 0.1
    assert "contention:" in printed and "driver overhead:" in printed
    if json.loads((live_run / "summary.json").read_text()).get("machine"):  # Linux: the meter counts
        assert "CPU-s by process" in printed and "rollout_worker" in printed
    predicted = simulate(validate_scenario(small_demo(trace, costs))).summary
    measured = json.loads((live_run / "summary.json").read_text())
    assert predicted["makespan_s"] == pytest.approx(measured["makespan_s"], rel=0.3)
    for pid, figures in measured["pipelines"].items():
        assert predicted["pipelines"][pid]["steps"] == figures["steps"]
    # Four steps a pipeline, on a machine whose speed moves by tens of percent from one minute
    # to the next (bench/repeatability.py): over all steps and within 2x.
    ratio = predicted["overall"]["mean_step_time_s"] / measured["overall"]["mean_step_time_s"]
    assert 0.5 < ratio < 2.0, (predicted["overall"]["mean_step_time_s"], measured["overall"]["mean_step_time_s"])


def test_the_live_folder_records_what_the_fit_needs(live_run: Path) -> None:
    import pandas as pd

    activity = pd.read_parquet(live_run / "activity.parquet")
    init = activity[activity["stage"] == "init"]
    assert set(init["pipeline_id"]) == {"ft", "lora"}
    # Under rlix the trainer's start and model load come before the init, holding no GPU.
    prefetched = {pid: p["prefetch_s"] for pid, p in json.loads((live_run / "summary.json").read_text())["pipelines"].items()}
    assert all(seconds > 0.5 for seconds in prefetched.values()), prefetched
    assert {"load", "offload"} <= set(activity["stage"])
    rollouts = pd.read_parquet(live_run / "rollouts.parquet")
    assert (rollouts["prompt_tokens"] > 0).all()
    # Each pipeline's init ends with its rollout workers up (2 ranks a pipeline here), started
    # one after another after its trainer, so the init holding outlasts the trainer's busy span.
    allocations = pd.read_parquet(live_run / "allocations.parquet")
    holds = allocations[(allocations["priority"] == 0) & (allocations["cluster"] == "actor_train")]
    hold_end = holds.groupby("pipeline_id", observed=True)["t_end"].max()
    machine = json.loads((live_run / "summary.json").read_text()).get("machine", {})
    if not machine:  # the meter counts on Linux only
        return
    starts = machine["worker_starts"]
    assert sorted((s["pipeline_id"], s["dp_rank"]) for s in starts) == [("ft", 0), ("ft", 1), ("lora", 0), ("lora", 1)]
    busy_end = init.groupby("pipeline_id", observed=True)["t_end"].max()
    for start in starts:
        assert busy_end[start["pipeline_id"]] - 0.05 <= start["t_created"] < start["t_ready"]
        assert start["t_ready"] <= hold_end[start["pipeline_id"]] + 0.05, (start, hold_end)
    # What the CPU-work model reads: each start's CPU (a process that imported torch and built
    # the model), within the CPU the run used, and where each worker's CPU went by the end.
    cpu = machine["worker_start_cpu_s"]
    assert len(cpu) == 4 and all(s > 0.1 for s in cpu), cpu
    assert machine["own_cpu_s"] > sum(cpu)
    accounts = machine["worker_cpu"]
    assert len(accounts) == 4
    for account in accounts:
        # The parts are process-time deltas over calls that do not overlap: within the total
        # (a little slack for a call the end of the pipeline caught mid-way).
        assert account["start_s"] + account["moves_s"] + account["generate_s"] <= account["total_s"] + 0.5
        assert account["alive_s"] > 0
    assert sum(a["wakes"] for a in accounts) >= 2 and sum(a["generate_s"] for a in accounts) > 0
