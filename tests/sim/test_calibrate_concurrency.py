"""The per-op slowdown across configs (rlix.sim.concurrency): a run's concurrency on a table
built by hand, the fit recovering a known slowdown from simulator runs made with known
constants, and cost files written before it still loading."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from rlix.runs.reader import load
from rlix.scenarios import parse_scenario
from rlix.scenarios.costs import CostsFile, read_costs_file, write_costs_file
from rlix.sim import simulate
from rlix.sim.calibrate import fit_runs
from rlix.sim.concurrency import SCALED, costs_at, factor, fit_concurrency, run_concurrency
from tests.sim.test_calibrate import TRUTH, _pipeline

#: One pipeline shape, repeated: every pipeline's spans last alike, so the medians of a run with
#: one and of a run with three differ only by the constants.
SHAPE = ("p", "full_finetune", 2, 2, 5, 10)
SLOWER = 1.5


def _row(stage: str, start: float, end: float, gpu: int = 0, rank: int = 0) -> dict[str, object]:
    return {"pipeline_id": "p", "cluster": "actor_infer", "dp_rank": rank, "gpu": gpu, "stage": stage,
            "t_start": start, "t_end": end}


def test_concurrency_of_a_table_built_by_hand() -> None:
    activity = pd.DataFrame([
        _row("rollout", 0.0, 2.0, gpu=0), _row("rollout", 0.0, 2.0, gpu=1),  # one span held on two GPUs
        _row("load", 1.0, 3.0, rank=1), _row("offload", 5.0, 6.0, rank=2),
        _row("init", 0.0, 10.0, rank=3),  # start-up is not work
    ])
    # Running: 1 on [0, 1), 2 on [1, 2), 1 on [2, 3), none on [3, 5), 1 on [5, 6): 5 span-seconds
    # over 4 seconds with something running.
    assert run_concurrency(activity) == pytest.approx(5.0 / 4.0)
    # Touching spans do not overlap: 1 at a time over [0, 2].
    assert run_concurrency(pd.DataFrame([_row("load", 0.0, 1.0), _row("load", 1.0, 2.0, rank=1)])) == 1.0
    assert run_concurrency(pd.DataFrame([_row("init", 0.0, 1.0)])) == 0.0


def _simulate(folder: Path, pipelines: int, costs: dict[str, float]) -> Path:
    trace = folder / "lengths.csv"
    pd.DataFrame({"prompt_tokens": [SHAPE[4]] * 4, "response_tokens": [SHAPE[5]] * 4}).to_csv(trace, index=False)
    specs = [{**_pipeline(gpu, SHAPE, trace), "id": f"p{gpu}"} for gpu in range(pipelines)]
    data = {"name": "known", "topology": {"num_nodes": 1, "gpus_per_node": pipelines}, "costs": costs,
            "engine": {"max_batch": 16, "balance": False, "migrate_on_expand": False},
            "pipelines": specs, "executor": {"checkpoint_every": 2}}
    result = simulate(parse_scenario(yaml.safe_dump(data)), out=folder / "run", plots=False)
    assert result.run_dir is not None
    return result.run_dir


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One pipeline at the true constants (the reference), three at once with every constant
    of the operations that share the cores SLOWER times the truth."""
    slow = {name: value * SLOWER if name in SCALED else value for name, value in TRUTH.items()}
    return (_simulate(tmp_path_factory.mktemp("alone"), 1, TRUTH),
            _simulate(tmp_path_factory.mktemp("three"), 3, slow))


def test_the_fit_recovers_a_known_slowdown(two_runs: tuple[Path, Path]) -> None:
    alone, three = two_runs
    c_alone, c_three = (run_concurrency(load(run).activity) for run in two_runs)
    assert c_three > c_alone + 0.5  # three pipelines on their own GPUs work at once
    calibration = fit_runs([alone, three], accept_simulated=True)
    fit = calibration.concurrency
    assert fit["fitted"] and fit["reference_concurrency"] == pytest.approx(c_alone)
    assert [r["concurrency"] for r in fit["runs"]] == pytest.approx([c_alone, c_three])
    assert factor(fit, c_three) == pytest.approx(SLOWER, rel=0.01)
    assert fit["slope"] == pytest.approx((SLOWER - 1.0) / (c_three - c_alone), rel=0.01)
    assert fit["relative_rms_linear"] < 0.01 < fit["relative_rms_flat"]
    # Held to the range the runs spanned: no extrapolation.
    assert factor(fit, c_three + 5.0) == factor(fit, c_three) and factor(fit, 0.0) == pytest.approx(1.0)
    # The constants are brought to the reference's concurrency: the truth (those one batch shape
    # can tell: the stages' fixed and per-token parts it cannot).
    for name in ("load_s", "offload_s", "publish_full_s", "checkpoint_full_s"):
        assert calibration.costs[name] == pytest.approx(TRUTH[name], rel=0.02), name
    # ... and rescaled to the three-pipeline run's, the slower constants.
    at_three = costs_at(calibration.costs_file(), c_three)
    assert at_three["load_s"] == pytest.approx(TRUTH["load_s"] * SLOWER, rel=0.03)
    assert at_three["launch_s"] == calibration.costs["launch_s"]  # start-up: as fitted


def test_one_concurrency_fits_no_slowdown(two_runs: tuple[Path, Path]) -> None:
    alone, three = two_runs
    fit = fit_concurrency([("a", load(alone).activity)])
    assert not fit["fitted"] and len(fit["runs"]) == 1
    assert factor(fit, 5.0) == 1.0
    # Concurrencies given (the simulator's count, say) replace the runs' own: 1.5x from 2 to 4.
    given = fit_concurrency([("a", load(alone).activity), ("b", load(three).activity)], [2.0, 4.0])
    assert given["fitted"] and given["reference_concurrency"] == 2.0
    assert given["slope"] == pytest.approx(0.25, rel=0.01) and factor(given, 4.0) == pytest.approx(SLOWER, rel=0.01)


def test_cost_files_without_the_fit_still_load(tmp_path: Path) -> None:
    old = tmp_path / "old.yaml"
    old.write_text("kind: rlix-costs\ncalibrated_from: [runs/live]\ncosts: {load_s: 0.5, launch_s: 1.0}\n"
                   "machine: {cores: 2, own_demand: 1.0, background_demand: 0.5}\n")
    costs = read_costs_file(old)
    assert costs.concurrency == {} and costs_at(costs, 3.0) == {"load_s": 0.5, "launch_s": 1.0}
    fitted = {"fitted": True, "form": "linear", "slope": 0.5, "effective_cores": 2.0, "reference_concurrency": 2.0}
    again = read_costs_file(write_costs_file(CostsFile(costs={"load_s": 0.5, "launch_s": 1.0},
                                                       concurrency=fitted), tmp_path / "new.yaml"))
    assert again.concurrency == fitted
    assert costs_at(again, 3.0) == {"load_s": pytest.approx(0.75), "launch_s": 1.0}  # 1 + 0.5 * (3 - 2)


def test_cost_files_read_exponents_as_numbers(tmp_path: Path) -> None:
    """PyYAML reads 5e-1 as a string (YAML 1.1 wants 5.0e-1); a hand-written cost file means the number."""
    path = tmp_path / "costs.yaml"
    path.write_text("kind: rlix-costs\ncosts: {load_s: 5e-1, launch_s: 1}\n"
                    "concurrency: {fitted: true, form: linear, slope: 5e-1, effective_cores: 2, reference_concurrency: 2}\n")
    costs = read_costs_file(path)
    assert costs.costs["load_s"] == 0.5 and costs.concurrency["slope"] == 0.5
    assert costs_at(costs, 3.0)["load_s"] == pytest.approx(0.75)
