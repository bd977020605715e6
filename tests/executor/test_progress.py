"""What a run shows while it runs: bars on a terminal, and in a log (stderr not a terminal) one
plain line each time a pipeline's steps or status change, with no carriage returns or cursor
moves. No Ray: the snapshots are the orchestrator's progress polls, written by hand."""

from __future__ import annotations

import io
from typing import Any

import pytest

from rlix.executor.progress import Progress
from rlix.executor.run import plan
from rlix.scenarios import load_scenario


def _snapshot(steps: dict[str, int], status: dict[str, str], reward: dict[str, float]) -> dict[str, Any]:
    return {"steps": steps, "pipelines": {pid: {"status": s} for pid, s in status.items()}, "reward": reward}


@pytest.fixture(scope="module")
def setups() -> list[Any]:
    return plan(load_scenario("tiny")).setups  # ft: 3 steps; lora: 2 adapters x 3


def test_a_log_gets_a_line_per_change_and_nothing_else(setups: list[Any]) -> None:
    log = io.StringIO()  # not a terminal
    progress = Progress(setups, quiet=False, stream=log)
    polls = [
        _snapshot({}, {"ft": "running"}, {}),
        _snapshot({}, {"ft": "running"}, {}),  # nothing new: no line
        _snapshot({"ft": 1}, {"ft": "running", "lora": "running"}, {"ft": 0.25}),
        _snapshot({"ft": 3, "lora": 6}, {"ft": "finished", "lora": "finished"}, {"ft": 0.5, "lora": 0.125}),
    ]
    for poll in polls:
        progress.update(poll)
    progress.close()
    lines = log.getvalue().splitlines()
    said = [line.split("] ", 1)[1] for line in lines]
    assert said == [
        "ft    0/3 steps, running",
        "lora  0/6 steps, waiting",
        "ft    1/3 steps, running, reward 0.250",
        "lora  0/6 steps, running",
        "ft    3/3 steps, finished, reward 0.500",
        "lora  6/6 steps, finished, reward 0.125",
    ]
    assert all(line.startswith("[") and " s] " in line for line in lines)
    assert "\r" not in log.getvalue() and "\x1b" not in log.getvalue()


def test_quiet_writes_nothing(setups: list[Any]) -> None:
    log = io.StringIO()
    progress = Progress(setups, quiet=True, stream=log)
    progress.update(_snapshot({"ft": 1}, {"ft": "running"}, {}))
    progress.close()
    assert log.getvalue() == ""


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar_per_pipeline(setups: list[Any]) -> None:
    terminal = _Terminal()
    progress = Progress(setups, quiet=False, stream=terminal)
    progress.update(_snapshot({"ft": 2}, {"ft": "running"}, {"ft": 0.25}))
    assert progress.bars["ft"].n == 2 and progress.bars["lora"].n == 0
    assert progress.bars["ft"].postfix == "running, reward 0.250"
    progress.close()
    assert "\r" in terminal.getvalue()  # redrawn in place


def test_the_run_says_what_it_trains_before_it_starts() -> None:
    """A scenario's model sizes are the simulator's cost classes: the line says what the
    executor trains instead."""
    from rlix.executor.run import describe

    line = describe(plan(load_scenario("agentic-4x32")), "runs/x")
    assert line.startswith("agentic-4x32: 4 pipelines (agent0, agent1, agent2, agent3) on 32 GPUs under rlix; ")
    assert "model 'tiny' (a small Qwen2-style model built here; the scenario's sizes, 7b, set only" in line
    assert line.endswith("hf rollouts; run folder runs/x")


def test_a_resume_with_no_pipeline_left_says_so() -> None:
    """A run cut after its pipelines all ended resumes only to write its folder."""
    import dataclasses

    from rlix.executor.run import describe

    line = describe(dataclasses.replace(plan(load_scenario("cpu-demo")), setups=[]), None)
    assert line.startswith("cpu-demo: no pipeline left to run on 4 GPUs under rlix; "), line
