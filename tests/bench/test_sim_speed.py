"""bench/sim_speed.py on a scenario that runs until its last job ends (no max_time_s): it runs
whole, its figures are the run's own, and a fraction of it is refused in one line."""

from __future__ import annotations

from typing import Any

import pytest

from rlix.scenarios import load_scenario
from rlix.sim import simulate
from tests.bench.bench_module import load


def test_a_stream_runs_whole_and_counts_what_the_run_records() -> None:
    sim_speed = load("sim_speed")
    reports: list[dict[str, Any]] = []
    whole = sim_speed.run("tiny", 1.0, [0.25, 0.5], None, None, reports.append)
    assert reports == [whole]  # no max_time_s: no checkpoints to pass, only the whole run
    result = simulate(load_scenario("tiny"), plots=False)
    assert whole["steps"] == result.summary["overall"]["steps"] > 0
    assert whole["rollouts"] == result.summary["overall"]["trajectories"] > 0
    assert whole["simulated_s"] == round(result.summary["makespan_s"], 1)


def test_a_fraction_of_a_run_without_an_end_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    sim_speed = load("sim_speed")
    with pytest.raises(SystemExit) as stop:
        sim_speed.scenario_cut("tiny", 0.5)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["sim_speed.py: error: tiny runs until its last job ends (no max_time_s): --fraction needs --days"]
    assert sim_speed.scenario_cut("tiny", 0.5, days=1.0).max_time_s == 43200.0


def test_a_scenario_that_does_not_load_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    sim_speed = load("sim_speed")
    for name, policy, said in (("nope", None, "no bundled scenario 'nope'"), ("tiny", "nope", "unknown policy")):
        with pytest.raises(SystemExit) as stop:
            sim_speed.scenario_cut(name, 1.0, policy)
        assert stop.value.code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("sim_speed.py: error: ") and said in line


def test_out_keeps_a_run_folder_and_replaces_one_only_with_overwrite(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    sim_speed = load("sim_speed")
    out = tmp_path / "run"
    sim_speed.main(["--scenario", "tiny", "--tables", "steps", "--out", str(out), "--json"])
    assert (out / "summary.json").is_file() and (out / "steps.parquet").is_file()
    written = (out / "summary.json").read_bytes()
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        sim_speed.main(["--scenario", "tiny", "--tables", "steps", "--out", str(out)])
    assert stop.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert "argument --out" in line and "--overwrite" in line
    assert (out / "summary.json").read_bytes() == written  # nothing lost to the refusal
    sim_speed.main(["--scenario", "tiny", "--tables", "steps", "--out", str(out), "--overwrite", "--json"])
    assert (out / "summary.json").is_file()
    with pytest.raises(SystemExit) as stop:
        sim_speed.main(["--scenario", "tiny", "--overwrite"])
    assert stop.value.code == 2
    assert "give --out" in capsys.readouterr().err
