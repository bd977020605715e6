"""A job log as arrivals (rlix.scenarios.jobs): CSV, JSON Lines and Parquet, Slurm-style
timestamps through a column map, per-job overrides, and bad logs refused in one line."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rlix.scenarios import ScenarioError, load_scenario
from rlix.sim.api import resolve_scenario
from rlix.sim.cli import main

SCENARIO = """\
name: joblog
topology: {num_nodes: 2, gpus_per_node: 8}
trace: {bundled: math_small}
templates:
  small:
    kind: full_finetune
    model: 1.5b
    home: 4
    clusters: {actor_train: {tp: 1, gpus: home}, actor_infer: {tp: 1, gpus: pool}}
    prompts_per_step: 4
    samples_per_prompt: 2
    steps: 2
pipelines:
  - id: fixed
    kind: full_finetune
    model: 1.5b
    home: 0-3
    clusters: {actor_train: {tp: 1, gpus: home}, actor_infer: {tp: 1, gpus: home}}
    prompts_per_step: 4
    samples_per_prompt: 2
    steps: 1
"""
#: A Slurm-like log: its own column names, timestamps, a blank override.
LOG = pd.DataFrame({
    "JobID": ["j1", "j2", "j3"],
    "Partition": ["small", "small", "small"],
    "Submit": ["2024-03-01T10:15:00", "2024-03-01T10:20:30", "2024-03-01T10:16:00"],
    "steps": [3, None, 1],
})
MAP = {"id": "JobID", "template": "Partition", "arrival": "Submit"}


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_a_slurm_log_in_every_format(scenario_file: Path, suffix: str) -> None:
    log = scenario_file.parent / f"log{suffix}"
    if suffix == ".csv":
        LOG.to_csv(log, index=False)
    elif suffix == ".jsonl":
        LOG.to_json(log, orient="records", lines=True)
    else:
        LOG.to_parquet(log)
    scenario = resolve_scenario(scenario_file, jobs=log, jobs_columns=MAP)
    got = [(p.id, p.arrival_s, p.steps) for p in scenario.pipelines]
    # counted from the first submission, in arrival order after the scenario's own pipelines
    assert got == [("fixed", 0.0, 1), ("j1", 0.0, 3), ("j3", 60.0, 1), ("j2", 330.0, 2)]
    assert all(p.home == 4 for p in scenario.pipelines[1:])


def test_seconds_and_the_cli(scenario_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "log.csv"
    log.write_text("id,template,arrival\na,small,5\nb,small,7.5\n")
    out = tmp_path / "run"
    assert main(["run", str(scenario_file), "--jobs", str(log), "--policy", "static", "--out", str(out), "--quiet"]) == 0
    text = (out / "scenario.yaml").read_text()
    assert "id: a" in text and "arrival_s: 7.5" in text and "jobs:" not in text  # the run lists its jobs
    assert load_scenario(out / "scenario.yaml").pipelines[-1].id == "b"


@pytest.mark.parametrize(("content", "columns", "words"), [
    ("id,template,arrival\nx,nope,5\n", [], "unknown template"),
    ("id,template,arrival\nx,small,-5\n", [], "line 2, column 'arrival': -5 is not seconds >= 0"),
    ("id,template,arrival\nx,small,yesterday\n", [], "'yesterday' is neither seconds nor a timestamp"),
    ("id,kind,arrival\nx,small,5\n", [], "no column template"),
    ("JobID,template,arrival\nx,small,5\n", ["--jobs-column", "id=Job"], "has no column 'Job'"),
    ("id,template,arrival\n", [], "no rows"),
    ("id,template,arrival\nx,small,1709287200\ny,small,1709287500\n", [],
     "line 2, column 'arrival': 1709287200 s: arrivals in seconds count from the run's start"),
])
def test_bad_logs_are_one_line(scenario_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               content: str, columns: list[str], words: str) -> None:
    log = tmp_path / "log.csv"
    log.write_text(content)
    out = tmp_path / "run"
    status = main(["run", str(scenario_file), "--jobs", str(log), *columns, "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert status == 2 and words in err and err.count("\n") == 1, err
    assert not out.exists()


def test_a_missing_log_names_it(scenario_file: Path) -> None:
    with pytest.raises(ScenarioError, match="no such file"):
        resolve_scenario(scenario_file, jobs=scenario_file.parent / "missing.csv")
