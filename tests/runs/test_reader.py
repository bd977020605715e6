"""Reading run folders back: a folder that kept only some tables (`--tables`) reads what it
has and says, in one line, what it does not have; a summary whose figures are not what readers
compute with is one line naming the file and the key."""

from __future__ import annotations

import json
import re
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
