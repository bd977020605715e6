"""`rlix-sim calibrate` on run folders whose summary.json `machine` record is malformed, or given
twice: one line naming the folder, exit 2, no cost file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from rlix.scenarios import load_scenario
from rlix.sim import simulate
from rlix.sim.cli import main


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny") / "run"
    simulate(load_scenario("tiny"), out=folder, plots=False)
    return folder


def _with_machine(sim_run: Path, tmp_path: Path, machine: Any) -> Path:
    run = tmp_path / "run"
    shutil.copytree(sim_run, run)
    summary = json.loads((run / "summary.json").read_text())
    summary["machine"] = machine
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def _refused(args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    out = tmp_path / "costs.yaml"
    assert main(["calibrate", *args, "--accept-simulated", "--out", str(out)]) == 2
    assert not out.exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("machine", "words"),
    [({"cores": 2}, "machine.own_demand: missing"),
     ({"cores": "x", "own_demand": 1, "background_demand": 1}, "machine.cores='x': not a finite number"),
     ({"cores": 2, "own_demand": float("nan"), "background_demand": 1}, "machine.own_demand=nan"),
     ({"cores": 2, "own_demand": 1, "background_demand": 1, "own_cpu_by_role_s": [1]}, "not CPU seconds by role"),
     ({"cores": 2, "own_demand": 1, "background_demand": 1, "own_cpu_by_role_s": {"a": "x"}},
      "not CPU seconds by role")],
    ids=["no demand", "cores not a number", "nan", "roles a list", "roles not numbers"],
)
def test_a_malformed_machine_record_is_one_line(sim_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                machine: dict[str, Any], words: str) -> None:
    run = _with_machine(sim_run, tmp_path, machine)
    err = _refused([str(run)], tmp_path, capsys)
    assert f"{run / 'summary.json'}: " in err and words in err, err


def test_a_folder_given_twice_is_refused(sim_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused([str(sim_run), f"{sim_run}/"], tmp_path, capsys)
    assert f"given twice (also as {sim_run})" in err, err


def test_a_well_formed_machine_record_is_kept(sim_run: Path, tmp_path: Path) -> None:
    run = _with_machine(sim_run, tmp_path, {"cores": 2, "own_demand": 1.5, "background_demand": 0.5,
                                            "own_cpu_by_role_s": {"driver": 3.0}})
    out = tmp_path / "costs.yaml"
    assert main(["calibrate", str(run), "--accept-simulated", "--out", str(out)]) == 0
    assert "own_demand: 1.5" in out.read_text()
