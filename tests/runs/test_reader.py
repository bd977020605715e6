"""Reading run folders back: a folder that kept only some tables (`--tables`) reads what it
has and says, in one line, what it does not have."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlix.runs import load
from rlix.runs.errors import RunError
from rlix.sim import simulate


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
