"""bench/fidelity.py's GPU switches: the live runs' backend and model reach the executor's
section of every live config, and a machine that cannot run them is refused before anything
is run or written."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

from rlix.scenarios.load import validate_scenario
from rlix.studies import fidelity
from tests.bench.bench_module import load


class Stop(Exception):
    """Raised by a stand-in to end `main` once the call under test was seen."""


def test_scenario_data_replaces_the_executor_settings_and_still_validates() -> None:
    data = fidelity.scenario_data(fidelity.VARIANTS["two-gpus"], executor={"backend": "vllm", "model": "/m"})
    assert data["executor"]["backend"] == "vllm"
    assert data["executor"]["model"] == "/m"
    plain = fidelity.scenario_data(fidelity.VARIANTS["two-gpus"])
    assert plain["executor"].get("backend", "hf") == "hf"
    # The rest of the section is kept, and the config is still a valid scenario.
    assert {k: v for k, v in data["executor"].items() if k not in ("backend", "model")} == {
        k: v for k, v in plain["executor"].items() if k not in ("backend", "model")}
    assert validate_scenario(data).executor.backend == "vllm"


def test_gpus_needed_is_the_largest_declared_topology() -> None:
    configs = [fidelity.scenario_data(None), fidelity.scenario_data(fidelity.VARIANTS["two-gpus"])]
    assert fidelity.gpus_needed(configs) == 4
    assert fidelity.gpus_needed(configs[1:]) == 2


def test_the_hf_backend_runs_anywhere() -> None:
    assert fidelity.live_backend_problem("hf", 64) is None


@pytest.mark.parametrize(("devices", "has_vllm", "says"), [
    (0, True, "no CUDA device"), (2, True, "this machine has 2 CUDA devices"), (4, False, "not installed"),
    (8, True, None)])
def test_vllm_needs_enough_cuda_devices_and_vllm(monkeypatch: pytest.MonkeyPatch, devices: int, has_vllm: bool,
                                                 says: str | None) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: devices > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: devices)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: (object() if has_vllm else None) if name == "vllm" else real_find_spec(name, *a))
    problem = fidelity.live_backend_problem("vllm", 4)
    if says is None:
        assert problem is None
    else:
        assert problem is not None and says in problem


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA devices")
def test_vllm_is_refused_without_gpus_and_nothing_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = load("fidelity")
    out = tmp_path / "fid"
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--backend", "vllm", "--out", str(out)])
    assert exit_info.value.code == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert not out.exists()


def test_a_model_folder_that_is_not_there_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = load("fidelity")
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--model", str(tmp_path / "nowhere"), "--out", str(tmp_path / "fid")])
    assert exit_info.value.code == 2
    assert "not an existing local folder" in capsys.readouterr().err
    assert not (tmp_path / "fid").exists()


def test_a_calibration_run_that_is_not_a_live_run_is_refused(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A missing folder and a simulator run folder: one line each, before --out is made."""
    from rlix.sim.cli import main as sim_main

    assert sim_main(["run", "tiny", "--no-alone", "--quiet", "--out", str(tmp_path / "sim")]) == 0
    capsys.readouterr()
    bench = load("fidelity")
    for folder, words in ((tmp_path / "nosuch", "no such run folder"), (tmp_path / "sim", "a simulator run")):
        with pytest.raises(SystemExit) as exit_info:
            bench.main(["--calibration-run", str(folder), "--out", str(tmp_path / "fid")])
        assert exit_info.value.code == 2
        assert words in capsys.readouterr().err
        assert not (tmp_path / "fid").exists()


def test_the_backend_and_model_reach_the_calibration_and_every_prediction(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    bench = load("fidelity")
    seen: list[tuple[str, Any]] = []

    def calibrate(*args: Any, **kwargs: Any) -> tuple[Path, Path, Path]:
        seen.append(("calibrate", kwargs["executor"]))
        return tmp_path, tmp_path / "costs.yaml", tmp_path / "lengths.parquet"

    def predict_and_run(name: str, *args: Any, **kwargs: Any) -> Any:
        seen.append((name, kwargs["executor"]))
        raise Stop

    monkeypatch.setattr(bench, "calibrate", calibrate)
    monkeypatch.setattr(bench, "predict_and_run", predict_and_run)
    with pytest.raises(Stop):
        bench.main(["--configs", "static", "--out", str(tmp_path / "fid")])
    assert seen == [("calibrate", {"backend": "hf", "model": "tiny"}), ("static", {"backend": "hf", "model": "tiny"})]


@pytest.mark.parametrize(("configs", "words"), [
    ("", "--configs: no configuration named (known: "),
    ("statik,static", "--configs: unknown statik (known: "),
])
def test_bad_configs_name_what_is_wrong(configs: str, words: str, capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    """An empty list was 'unknown []', a misspelt name 'unknown ['statik']'."""
    with pytest.raises(SystemExit) as caught:
        load("fidelity").main(["--configs", configs, "--out", str(tmp_path / "fid")])
    assert caught.value.code == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "fid").exists()
