"""`rlix-sim calibrate`: recovers the constants a simulator run was made with, refuses folders
that cannot be fitted in one line, and its cost file is applied by `--costs` and `costs:`.

The simulator runs here are shaped so that every constant can be told from the tables: three
pipelines on a GPU each (no sharing, so no preemption), each with its own constant rollout
length and batch size (engine calls of different sizes, batches of different token counts).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from rlix.scenarios import load_scenario, parse_scenario
from rlix.scenarios.costs import read_costs_file
from rlix.scenarios.errors import ScenarioError
from rlix.sim import simulate
from rlix.sim.calibrate import fit_runs
from rlix.sim.cli import main

#: The constants the simulator runs with, as a calibration would give them.
TRUTH = {
    "decode_iteration_s": 0.004, "decode_per_sequence_s": 0.0015, "prefill_per_token_s": 0.0002,
    "forward_fixed_s": 0.05, "forward_per_token_s": 0.0004, "train_fixed_s": 0.2, "train_per_token_s": 0.001,
    "load_s": 0.3, "offload_s": 0.45, "publish_full_s": 0.12, "publish_adapter_s": 0.04,
    "checkpoint_full_s": 0.25, "checkpoint_adapter_s": 0.08,
    # Start-up: the three pipelines start together, and with one count seen it is fixed.
    "launch_s": 2.1, "launch_per_pipeline_s": 0.0, "launch_stagger_s": 0.3,
    "init_s": 0.6, "init_per_pipeline_s": 0.0, "worker_start_s": 1.5,
    # rlix's pipelines read their weights before they ask for the init: launch, then this.
    "prefetch_s": 0.9, "prefetch_per_pipeline_s": 0.0, "worker_start_multi_lora_s": 2.25,
    "expand_overhead_s": 0.05, "shrink_overhead_s": 0.1,
}
#: (id, kind, prompts x samples, prompt tokens, response tokens) per pipeline, GPU = position.
SHAPES = (("ft1", "full_finetune", 2, 2, 5, 10), ("ft2", "full_finetune", 2, 4, 20, 30),
          ("lora", "multi_lora", 3, 2, 40, 20))


def _pipeline(gpu: int, shape: tuple[Any, ...], trace: Path) -> dict[str, Any]:
    pid, kind, prompts, samples, _prompt, _response = shape
    pipeline: dict[str, Any] = {
        "id": pid, "kind": kind, "model": "1.5b", "home": str(gpu), "prompts_per_step": prompts,
        "samples_per_prompt": samples, "steps": 4, "trace": {"path": str(trace)},
        "clusters": {"actor_train": {"tp": 1, "gpus": str(gpu)}, "actor_infer": {"tp": 1, "gpus": str(gpu)}},
    }
    if kind == "multi_lora":
        pipeline["adapters"] = [{"name": "a0", "max_staleness": 0}]
    else:
        pipeline["max_staleness"] = 0
    return pipeline


def scenario_text(folder: Path, costs: Any) -> str:
    pipelines = []
    for gpu, shape in enumerate(SHAPES):
        trace = folder / f"{shape[0]}.csv"
        pd.DataFrame({"prompt_tokens": [shape[4]] * 4, "response_tokens": [shape[5]] * 4}).to_csv(trace, index=False)
        pipelines.append(_pipeline(gpu, shape, trace))
    data = {"name": "known", "topology": {"num_nodes": 1, "gpus_per_node": 3}, "costs": costs,
            "engine": {"max_batch": 16, "balance": False, "migrate_on_expand": False},
            "pipelines": pipelines, "executor": {"checkpoint_every": 2}}
    return yaml.safe_dump(data)


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("known")
    result = simulate(parse_scenario(scenario_text(folder, TRUTH)), out=folder / "run", plots=False)
    assert result.run_dir is not None
    return result.run_dir


def test_recovers_the_constants_a_simulator_run_was_made_with(sim_run: Path) -> None:
    fitted = fit_runs([sim_run], accept_simulated=True).costs
    assert set(fitted) == set(TRUTH)
    for name, value in TRUTH.items():
        assert fitted[name] == pytest.approx(value, rel=0.02, abs=1e-9), name


def test_each_fit_has_a_residual_and_its_samples(sim_run: Path) -> None:
    calibration = fit_runs([sim_run], accept_simulated=True)
    for fit in calibration.fits:
        assert fit.samples > 0 and fit.residual_s >= 0, fit
    assert calibration.contention["applied"] is False and calibration.contention["samples"] > 0


def test_the_cost_file_runs_the_simulator_as_the_constants_did(sim_run: Path, tmp_path: Path) -> None:
    assert main(["calibrate", str(sim_run), "--accept-simulated", "--out", str(tmp_path / "costs.yaml"),
                 "--trace-out", str(tmp_path / "lengths.parquet")]) == 0
    costs = read_costs_file(tmp_path / "costs.yaml")
    assert costs.calibrated_from == [str(sim_run)] and set(costs.fits) == set(TRUTH)
    # `costs:` as a path relative to the scenario file is read at load time.
    (tmp_path / "again.yaml").write_text(scenario_text(tmp_path, "costs.yaml"))
    scenario = load_scenario(tmp_path / "again.yaml")
    assert scenario.costs == costs.costs
    again = simulate(scenario).summary["makespan_s"]
    original = json.loads((sim_run / "summary.json").read_text())["makespan_s"]
    assert again == pytest.approx(original, rel=0.02)
    lengths = pd.read_parquet(tmp_path / "lengths.parquet")
    assert set(lengths["response_tokens"]) == {10, 30, 20}


def test_run_takes_a_cost_file(sim_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["calibrate", str(sim_run), "--accept-simulated", "--out", str(tmp_path / "costs.yaml")])
    out = tmp_path / "run"
    assert main(["run", "tiny", "--costs", str(tmp_path / "costs.yaml"), "--out", str(out), "--quiet", "--no-alone"]) == 0
    written = yaml.safe_load((out / "scenario.yaml").read_text())
    assert written["costs"]["load_s"] == pytest.approx(TRUTH["load_s"], rel=0.02)  # the numbers, not the path


def test_a_bad_cost_file_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "costs.yaml").write_text("kind: rlix-costs\ncosts: {load_s: fast}\n")
    with pytest.raises(ScenarioError, match=r"costs=.*costs\.yaml.*costs\.load_s"):
        parse_scenario(scenario_text(tmp_path, "costs.yaml"), base_dir=tmp_path)
    with pytest.raises(ScenarioError, match="no such cost file"):
        parse_scenario(scenario_text(tmp_path, "missing.yaml"), base_dir=tmp_path)


def _refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["calibrate", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("rlix-sim: error: "), err
    return err


def test_refuses_folders_it_cannot_fit_in_one_line(sim_run: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "costs.yaml")
    assert "a simulator run" in _refused([str(sim_run), "--out", out], capsys)
    assert "no events.jsonl" in _refused([str(tmp_path), "--out", out], capsys)
    assert "no such run folder" in _refused([str(tmp_path / "nowhere"), "--out", out], capsys)
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("events.jsonl", "summary.json", "scenario.yaml", "rollouts.parquet", "activity.parquet",
                 "allocations.parquet"):
        (broken / name).write_bytes((sim_run / name).read_bytes())
    assert "steps" in _refused([str(broken), "--accept-simulated", "--out", out], capsys)
    assert not (tmp_path / "costs.yaml").exists()


def test_constants_rescale_to_another_load() -> None:
    from rlix.scenarios.costs import CostsFile
    from rlix.sim.calibrate import costs_for_background

    measured = CostsFile(costs={"load_s": 1.0}, machine={"cores": 2.0, "own_demand": 1.0, "background_demand": 3.0})
    # (1 + 3) / 2 = 2x slower than idle then; (1 + 0.5) / 2 < 1: not slowed at all now.
    assert costs_for_background(measured, 0.5)["load_s"] == pytest.approx(0.5)
    assert costs_for_background(measured, 5.0)["load_s"] == pytest.approx(1.5)  # 3x over 2x
    assert costs_for_background(CostsFile(costs={"load_s": 1.0}), 5.0) == {"load_s": 1.0}


def test_machine_load_averages_what_every_run_counted() -> None:
    """The cores a run used and how busy the machine was are averaged over the runs when every
    run counted them, and left out when one run (recorded before the meter counted them) did not."""
    from types import SimpleNamespace

    from rlix.sim.calibrate import machine_load

    def run(**machine: float) -> Any:
        return SimpleNamespace(run=SimpleNamespace(summary={"machine": {"cores": 2, "own_demand": 0.2,
                                                                        "background_demand": 0.0, **machine}}))

    both = machine_load([run(own_cores=1.0, machine_busy_share=0.8), run(own_cores=1.6, machine_busy_share=0.9)])
    assert both["own_cores"] == pytest.approx(1.3) and both["machine_busy_share"] == pytest.approx(0.85)
    older = machine_load([run(own_cores=1.0, machine_busy_share=0.8), run()])
    assert "own_cores" not in older and "machine_busy_share" not in older and older["cores"] == 2.0


@pytest.mark.parametrize("trace, words", [("lengths.txt", "not .txt"), ("costs.yaml", "the same file as --out")])
def test_a_trace_out_that_cannot_be_written_is_refused_before_anything(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], trace: str, words: str) -> None:
    from rlix.sim.cli import main as sim_main

    assert sim_main(["calibrate", str(tmp_path / "any-run"), "--out", str(tmp_path / "costs.yaml"),
                     "--trace-out", str(tmp_path / trace)]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_cost_file_in_a_folder_not_made_yet_is_written_there(sim_run: Path, tmp_path: Path) -> None:
    """--out passes its check when its folder can be made; the fit's minutes are not lost to a
    traceback at the end because the cost file's folder was never made."""
    out = tmp_path / "new" / "deeper" / "costs.yaml"
    assert main(["calibrate", str(sim_run), "--accept-simulated", "--out", str(out)]) == 0
    assert read_costs_file(out).costs and [p.name for p in out.parent.iterdir()] == ["costs.yaml"]


def test_it_says_what_a_scenario_needs_besides_the_cost_file(sim_run: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The constants alone leave a scenario its own lengths (bundled cpu-demo: 315 s predicted
    for a 47-s live run), so calibrate prints the command that predicts the runs: a run's own
    scenario (whose engine: is the one the run had) with the cost file and the runs' lengths."""
    out, lengths = tmp_path / "costs.yaml", tmp_path / "lengths.parquet"
    assert main(["calibrate", str(sim_run), "--accept-simulated", "--out", str(out)]) == 0
    hint = capsys.readouterr().out.strip().splitlines()[-1]
    assert f"rlix-sim run {sim_run / 'scenario.yaml'} --costs {out} --trace FILE" in hint and "--trace-out" in hint
    assert main(["calibrate", str(sim_run), "--accept-simulated", "--out", str(out), "--trace-out", str(lengths)]) == 0
    hint = capsys.readouterr().out.strip().splitlines()[-1]
    assert hint.endswith(f"--costs {out} --trace {lengths}")
    # The printed command runs and replays the run's own lengths.
    assert main(["run", str(sim_run / "scenario.yaml"), "--costs", str(out), "--trace", str(lengths), "--no-alone",
                 "--quiet", "--out", str(tmp_path / "predicted")]) == 0
