"""Reading run folders back: a folder that kept only some tables (`--tables`) reads what it
has and says, in one line, what it does not have; a summary whose figures are not what readers
compute with is one line naming the file and the key, as is an event log whose last line was
cut short."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from rlix.runs import load
from rlix.runs.errors import RunError
from rlix.runs.folder import write_run
from rlix.sim import simulate
from rlix.sim.cli import main
from tests.runs.test_jobs import ALONE, two_jobs


def test_a_folder_with_some_tables_reads_those_and_names_the_rest(tmp_path: Path) -> None:
    full = simulate("tiny", out=tmp_path / "full", plots=False)
    simulate("tiny", out=tmp_path / "steps", plots=False, tables={"steps", "jobs"})
    run = load(tmp_path / "steps")
    assert run.kept_tables == ["steps", "jobs"]
    assert len(run.steps) == len(full.tables["steps"]) and len(run.jobs) == 2
    with pytest.raises(RunError, match="no rollouts table here: the run kept steps, jobs"):
        _ = run.rollouts
    with pytest.raises(RunError, match="not allocations, rollouts, activity, waits"):
        run.tables()
    whole = load(tmp_path / "full")
    assert set(whole.kept_tables) >= {"allocations", "steps", "rollouts", "activity", "waits"}
    assert whole.tables().makespan_s == pytest.approx(full.summary["makespan_s"])


@pytest.mark.parametrize(("key", "value", "message"), [
    ("makespan_s", "abc", 'makespan_s is a string ("abc"), not a number'),
    ("makespan_s", None, "makespan_s is null, not a number"),
    ("makespan_s", True, "makespan_s is a boolean (true), not a number"),
    ("makespan_s", [1.0], "makespan_s is an array, not a number"),
    ("makespan_s", -1.0, "makespan_s is -1.0; it must be a finite number, at least 0"),
    ("makespan_s", float("nan"), "makespan_s is nan; it must be a finite number, at least 0"),
    ("overall", 3, "overall is a number (3), not an object {...}"),
    ("pipelines", [], "pipelines is an array, not an object {...}"),
])
def test_a_summary_figure_of_the_wrong_type_is_one_line_naming_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: object, message: str
) -> None:
    folder = write_run(two_jobs(), tmp_path / "run", scenario_yaml="name: x\n", plots=False, alone_s=ALONE)
    summary_file = folder / "summary.json"
    summary = json.loads(summary_file.read_text())
    summary_file.write_text(json.dumps({**summary, key: value}))
    with pytest.raises(RunError, match=re.escape(f"{summary_file}: {message}")):
        load(folder)
    assert main(["jobs", str(folder)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"rlix-sim: error: {summary_file}: {message}\n"


def test_a_summary_with_an_integer_makespan_reads(tmp_path: Path) -> None:
    folder = write_run(two_jobs(), tmp_path / "run", scenario_yaml="name: x\n", plots=False, alone_s=ALONE)
    summary_file = folder / "summary.json"
    summary = json.loads(summary_file.read_text())
    summary_file.write_text(json.dumps({**summary, "makespan_s": round(summary["makespan_s"]) + 1}))
    assert main(["jobs", str(folder), "--json"]) == 0
    assert load(folder).tables().makespan_s == round(summary["makespan_s"]) + 1


@pytest.mark.parametrize("kept", [0.5, 0.999], ids=["half", "last-line"])
def test_an_event_log_cut_short_mid_line_is_one_error_naming_it(run_dir: Path, tmp_path: Path, kept: float) -> None:
    """The log is read lazily: a load that did not look at its end returned a Run whose specs
    and removals came from part of the run without a word."""
    folder = tmp_path / "run"
    shutil.copytree(run_dir, folder)
    events = folder / "events.jsonl"
    text = events.read_bytes()
    events.write_bytes(text[: int(len(text) * kept)])
    assert not events.read_bytes().rstrip().endswith(b"}")
    with pytest.raises(RunError, match=re.escape(f"{events}: the last line is not JSON (")):
        load(folder)


def test_a_one_line_log_and_one_without_a_final_newline_read(run_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    shutil.copytree(run_dir, folder)
    events = folder / "events.jsonl"
    events.write_bytes(events.read_bytes().rstrip(b"\n"))
    assert len(list(load(folder).events())) > 0
    events.write_bytes(events.read_bytes().split(b"\n")[0])
    assert list(load(folder).events()) == []
