"""`rlix-exec` input errors: one clear line, before Ray or any actor starts."""

from __future__ import annotations

from pathlib import Path

import pytest
import ray
import yaml

from rlix.executor.cli import main
from rlix.scenarios import load_scenario


def _scenario_file(tmp_path: Path, **executor: object) -> str:
    data = yaml.safe_load(load_scenario("cpu-demo").to_yaml())
    data["executor"].update(executor)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlix-exec: error: "), err
    return err[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "no-such-scenario"], "no-such-scenario"),
    ],
)
def test_bad_scenario_is_one_line(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    assert needle in _one_error_line(capsys)
    assert not ray.is_initialized()


def test_bad_model_path_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-model-here"
    assert main(["run", _scenario_file(tmp_path, model=str(missing))]) == 2
    line = _one_error_line(capsys)
    assert "executor.model" in line and str(missing) in line
    assert not ray.is_initialized()


def test_unknown_task_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", _scenario_file(tmp_path, task="no_such_task")]) == 2
    assert "no_such_task" in _one_error_line(capsys)
    assert not ray.is_initialized()


@pytest.mark.parametrize(("command", "example"), [("run", "rlix-exec run cpu-demo"),
                                                  ("resume", "rlix-exec resume runs/demo"),
                                                  ("kill", "rlix-exec kill ft")])
def test_each_command_help_says_what_it_does_with_an_example(command: str, example: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    usage, description = text.split("\n\n")[:2]
    assert usage.startswith(f"usage: rlix-exec {command}")
    assert not description.startswith("positional arguments"), text  # a description comes first
    assert example in text.split("example")[-1], text


def test_trajectory_counts_name_attempts_that_ended_with_their_pipeline_apart() -> None:
    """An attempt aborted with its pipeline (or in flight at a stop) was never re-queued: the
    line counted it as "cut short and re-queued"."""
    from rlix.executor.cli import trajectory_counts

    assert trajectory_counts(["completed", "requeued", "completed"]) == (
        "2 completed; 1 attempts cut short and re-queued")
    assert trajectory_counts(["completed", "requeued", "aborted", "in_flight", "aborted"]) == (
        "1 completed; 1 attempts cut short and re-queued; 3 ended with their pipeline or the run")


def test_ray_address_in_the_environment_is_joined_as_ray_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A driver given RAY_ADDRESS (as `ray job submit` gives it) joins that cluster, and says so;
    it started a local Ray instead, and a multi-node scenario was refused there. Nothing listens
    at port 1, so the join fails in one line before any Ray starts, nothing written."""
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    out = tmp_path / "run"
    assert main(["run", "cpu-demo", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "joining the Ray cluster at 127.0.0.1:1 (RAY_ADDRESS; unset it to start Ray locally)" in err
    assert "cannot join the Ray cluster at '127.0.0.1:1'" in err.splitlines()[-1]
    assert not out.exists()
