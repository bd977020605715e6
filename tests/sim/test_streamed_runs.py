"""Streamed simulator runs (`rlix-sim run --tables`, `simulate(tables=...)`): the same event
log and summary as a run kept in memory, tables streamed in pieces equal to whole ones, a
folder that replays and checks, and a run length set from the command line."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rlix.runs import replay, stream
from rlix.runs.verify import check
from rlix.scenarios import ScenarioError, load_scenario
from rlix.sim import rollout, simulate
from rlix.sim.cli import main
from rlix.traces.tables import read_table


def _summary(run_dir: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    return loaded


@pytest.fixture(scope="module")
def in_memory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """blog-4on12 with every table built in memory at the end (no sink)."""
    out = tmp_path_factory.mktemp("memory") / "run"
    simulate("blog-4on12", out=out, plots=False)
    return out


def test_steps_only_summary_equals_the_all_tables_summary(in_memory: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # Cut the per-trajectory buffers as soon as anything is completed, so the cut is exercised.
    monkeypatch.setattr(rollout, "MIN_DROP", 1)
    result = simulate("blog-4on12", out=tmp_path / "steps", plots=False, tables={"steps"})
    assert result.run_dir is not None
    assert _summary(result.run_dir) == _summary(in_memory)
    assert (result.run_dir / "events.jsonl").read_bytes() == (in_memory / "events.jsonl").read_bytes()
    assert {p.name for p in result.run_dir.glob("*.parquet")} == {"steps.parquet"}
    pd.testing.assert_frame_equal(read_table(result.run_dir, "steps"), read_table(in_memory, "steps"))
    assert result.tables["rollouts"].empty and result.tables["allocations"].empty


def test_streamed_tables_equal_the_in_memory_ones(in_memory: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream, "PIECE_ROWS", 50)  # many row groups
    out = tmp_path / "all"
    simulate("blog-4on12", out=out, plots=False, tables=stream.ALL_TABLES)
    import pyarrow.parquet as pq

    assert pq.ParquetFile(out / "activity.parquet").num_row_groups > 1
    for name in ("allocations", "activity", "rollouts", "steps", "waits", "jobs"):
        pd.testing.assert_frame_equal(read_table(out, name) if name != "jobs" else pd.read_parquet(out / "jobs.parquet"),
                                      read_table(in_memory, name) if name != "jobs" else pd.read_parquet(in_memory / "jobs.parquet"))
    assert _summary(out) == _summary(in_memory)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left
    assert not (out / stream.COVER_FOLDER).exists()


def test_a_streamed_folder_replays_and_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["run", "tiny", "--tables", "steps,allocations", "--no-alone", "--quiet", "--out", str(out)]) == 0
    result = replay(out)
    assert result.identical and result.num_decisions > 0
    num_allocations, num_rollouts = check(out)
    assert num_allocations and num_rollouts is None
    capsys.readouterr()
    assert main(["check", str(out)]) == 0
    assert "not checked: rollouts" in capsys.readouterr().out


def test_unknown_tables_are_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["run", "tiny", "--tables", "steps,rollout", "--out", str(tmp_path / "run")])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "unknown table(s) rollout (known: allocations, steps, rollouts, activity, waits, jobs)" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("option, value, words", [
    ("--seed", "-1", "argument --seed: must be 0 or more"),
    ("--trace", "gone.csv", "--trace: no such file: "),
    ("--trace", "math_61k", "--trace: no such file: math_61k (nor a bundled trace: agentic_small, math_16k, math_small)"),
    ("--jobs", "gone.csv", "--jobs: no such file: "),
    ("--costs", "gone.json", "--costs: no such file: "),
])
def test_a_bad_override_names_its_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str, words: str
) -> None:
    """Named as the option it came from, not as the line of the scenario file it overrides
    (argparse's own checks exit, the others return the usage error's code)."""
    argv = ["run", "tiny", option, str(tmp_path / value) if "." in value else value, "--out", str(tmp_path / "run")]
    try:
        code = main(argv)
    except SystemExit as caught:
        code = caught.code
    assert code == 2
    err = capsys.readouterr().err
    assert words in err and "tiny.yaml" not in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("option, name, content, words", [
    ("--costs", "costs.yaml", "load_s: 2\n", "--costs: the cost file {path}:1: load_s: unknown field (a cost file holds"),
    ("--costs", "costs.yaml", "costs: {load_s: -1}\n", "--costs: {path}:1: costs.load_s=-1.0: cost field 'load_s' must be positive"),
    ("--costs", "costs.yaml", "kind: rlix-costs\ncosts:\n  load_s: 1\n  lod_s: 1\n",
     "--costs: {path}:4: costs.lod_s=1.0: unknown cost field 'lod_s'; did you mean 'load_s'?"),
    ("--costs", "costs.yaml", "costs:\n  load_s: [1]\n", "--costs: the cost file {path}:2: costs.load_s: input should be a valid number"),
    ("--jobs", "jobs.csv", "x\n1\n", "--jobs: {path}: the job log has no column id"),
])
def test_a_bad_file_behind_an_option_is_named_as_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, name: str, content: str, words: str
) -> None:
    """What is wrong inside the file, named as the option that gave it, in one line and
    before any run."""
    path = tmp_path / name
    path.write_text(content)
    scenario = "lab-day" if option == "--jobs" else "tiny"
    assert main(["run", scenario, option, str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert words.format(path=path) in err and ".yaml:" not in err.replace(str(path), "")
    assert err.count("\n") == 1 and not (tmp_path / "run").exists()


@pytest.mark.parametrize("old, new, field, words", [
    ("costs: {}", "costs: {load_s: -1.0}", "costs", "costs.load_s=-1.0: cost field 'load_s' must be positive"),
    ("gpu: h100", "gpu: h200", "topology", "topology.gpu='h200': no cost figures for this GPU in the simulator"),
])
def test_what_the_cost_model_refuses_is_an_error_at_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, field: str, words: str
) -> None:
    """The cost model's checks (a constant's range and name, the GPU type) reported like the
    schema's: file, line, field."""
    path = tmp_path / "tiny.yaml"
    text = load_scenario("tiny").to_yaml()
    assert old in text
    path.write_text(text.replace(old, new))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.startswith(f"{field}:"))
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{line}: {words}" in err
    assert err.count("\n") == 1 and not (tmp_path / "run").exists()
    with pytest.raises(ScenarioError, match=words.split("=")[0]):
        simulate(str(path))


def test_the_run_length_is_set_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["run", "tiny", "--duration-s", "40", "--tables", "steps", "--no-alone", "--quiet",
                 "--out", str(out)]) == 0
    assert _summary(out)["makespan_s"] == 40.0
    assert "max_time_s: 40.0" in (out / "scenario.yaml").read_text()
    with pytest.raises(SystemExit):
        main(["run", "tiny", "--days", "1", "--duration-s", "5"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_simulate_wants_a_folder_for_chosen_tables() -> None:
    from rlix.runs import RunError

    with pytest.raises(RunError, match="give out="):
        simulate("tiny", tables={"steps"})


def test_a_run_logs_plain_progress_lines_where_stderr_is_no_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Captured stderr is not a terminal: plain lines, no bar redrawn in place."""
    assert main(["run", "tiny", "--duration-s", "600", "--tables", "steps", "--no-alone",
                 "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    progress = [line for line in err.splitlines() if line.startswith("tiny [rlix]: ")]
    assert progress and progress[0].startswith("tiny [rlix]: 60 sim s (10%) after ")
    assert "\r" not in err and "sim s/s" not in err


def test_a_streamed_run_cut_while_its_alone_times_run_leaves_nothing(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import rlix.sim.api

    def interrupted(scenario: Any, **kwargs: Any) -> dict[str, float]:
        raise KeyboardInterrupt

    monkeypatch.setattr(rlix.sim.api, "alone_jct_s", interrupted)
    with pytest.raises(KeyboardInterrupt):
        simulate("tiny", out=tmp_path / "run", plots=False, tables={"steps"}, alone=True)
    assert list(tmp_path.iterdir()) == []


def test_a_model_too_big_for_its_rollout_tp_is_an_error_at_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Checked before the run, not when the pipeline starts (a traceback mid-run)."""
    path = tmp_path / "big.yaml"
    text = load_scenario("tiny").to_yaml()
    path.write_text(text.replace("model: 1.5b", "model: 70b", 1))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "model: 70b" in text)
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{line}: pipelines[0].model='70b': model 70b does not fit at tp=1" in err
    assert err.count("\n") == 1 and not (tmp_path / "run").exists()
    with pytest.raises(ScenarioError, match="does not fit"):
        simulate(str(path))


def test_a_streamed_run_stopped_by_sigterm_leaves_nothing(tmp_path: Path) -> None:
    """SIGTERM (a job scheduler's stop, `timeout`) cleans up as Ctrl-C does."""
    out = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "rlix.sim.cli", "run", "lab-day", "--no-alone", "--quiet",
                                "--tables", "steps", "--out", str(out)], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not [p for p in tmp_path.iterdir() if p.name.startswith(".run.")]:  # the run is streaming
        assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline, "no streamed folder within 120 s"
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 143, err
    assert "Traceback" not in err and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("tables", [[], ["--tables", "steps"]])
def test_a_run_cut_before_its_pipelines_end_is_not_finished(tmp_path: Path, tables: list[str]) -> None:
    out = tmp_path / "run"
    assert main(["run", "tiny", "--duration-s", "5", "--no-alone", "--quiet", "--out", str(out), *tables]) == 0
    summary = _summary(out)
    assert summary["finished"] is False and summary["unfinished"] == ["ft", "lora"]


def test_trace_takes_a_bundled_traces_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["run", "tiny", "--trace", "math_16k", "--quiet", "--no-alone", "--out", str(out)]) == 0
    assert "bundled: math_16k" in (out / "scenario.yaml").read_text()
    capsys.readouterr()
    argv = ["run", "tiny", "--trace", "math_16k", "--column", "response_tokens=x", "--out", str(tmp_path / "other")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--column maps a trace file's columns; the bundled trace math_16k" in err
