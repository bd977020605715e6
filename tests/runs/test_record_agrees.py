"""A run folder's record holds together: `check` holds each table to the event log (a row
deleted, a table emptied, a row the log never caused), `replay` holds the log's end to
summary.json (a log cut short), and both read the log's header through one validation."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rlix.runs import RunError, check, replay
from rlix.runs.crosscheck import CLOSE_TOL_S
from rlix.sim.cli import main as sim_main
from tests.runs.run_cli import run_cli_main

TABLES = ("allocations", "steps", "rollouts", "activity", "waits", "jobs")


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run_dir, tmp_path / "run"))


def _edit_table(folder: Path, name: str, edit: Callable[[pd.DataFrame], pd.DataFrame]) -> None:
    path = folder / f"{name}.parquet"
    edit(pd.read_parquet(path)).to_parquet(path)


def _check_fails(folder: Path, table: str, capsys: pytest.CaptureFixture[str]) -> str:
    """`rlix-sim check` exits 1 naming `table` as disagreeing with the log; its line."""
    capsys.readouterr()
    assert run_cli_main("check", str(folder)) == 1
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"{folder}: the {table} table disagrees with events.jsonl: "), out
    assert out.count("\n") == 0
    return out


def test_the_untouched_run_agrees_with_its_log(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli_main("check", str(run_dir)) == 0
    assert capsys.readouterr().out.strip().endswith("its tables agree with events.jsonl")


# Rows whose loss the log shows: p0's init holding (both GPUs: one alone breaks invariant 2;
# its grant was applied), p0's second step, p0's second-step trajectory (the only one that
# step consumed), p1's first wait, p1's job row.
DELETED = {
    "allocations": ("pipeline_id == 'p0' and cluster == 'actor_train' and t_start == 0.0",
                    "p0/actor_train on GPU 2: 2 holding(s) in the table, but the log has 3"),
    "steps": ("pipeline_id == 'p0' and step == 1", "step(s) the log finished are not in it: p0/base step 1"),
    "rollouts": ("pipeline_id == 'p0' and step_consumed == 1",
                 "no completed trajectory consumed by 1 step(s) the log trained: p0/base step 1"),
    "waits": ("pipeline_id == 'p1' and t_request == 0.0", "p1/actor_train: 1 wait(s) in the table"),
    "jobs": ("pipeline_id == 'p1'", "no row for p1, registered in the log"),
}


@pytest.mark.parametrize("table", sorted(DELETED))
def test_check_sees_a_row_deleted_by_hand(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          table: str) -> None:
    folder = _copy(run_dir, tmp_path)
    query, message = DELETED[table]
    _edit_table(folder, table, lambda frame: frame.drop(frame.query(query).index))
    assert message in _check_fails(folder, table, capsys)


@pytest.mark.parametrize("table", TABLES)
def test_check_sees_an_emptied_table(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     table: str) -> None:
    folder = _copy(run_dir, tmp_path)
    _edit_table(folder, table, lambda frame: frame.iloc[:0])
    _check_fails(folder, table, capsys)


def test_check_sees_an_emptied_folder(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _copy(run_dir, tmp_path)
    for table in TABLES:
        _edit_table(folder, table, lambda frame: frame.iloc[:0])
    _check_fails(folder, "allocations", capsys)


def test_check_sees_rows_the_log_never_caused(run_dir: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    folder = _copy(run_dir, tmp_path)
    # p0 holding its training GPUs once more after its end: no overlap, its whole mapping, so
    # invariants 1 and 2 hold, but no grant of the log made that holding.
    extra = lambda frame: pd.concat([frame, frame.query("pipeline_id == 'p0' and t_start == 65.0").assign(  # noqa: E731
        t_start=72.0, t_end=75.0)], ignore_index=True)
    _edit_table(folder, "allocations", extra)
    assert "3 Grant/Expand decision(s) of it that can have held it" in _check_fails(folder, "allocations", capsys)
    folder = _copy(run_dir, tmp_path / "steps")
    _edit_table(folder, "steps", lambda frame: pd.concat([frame, frame.iloc[:1].assign(step=7)], ignore_index=True))
    assert "in it the log never finished: p0/base step 7" in _check_fails(folder, "steps", capsys)


# Job rows the log contradicts: `rlix-sim jobs` counted a row twice, a stranger as a job, a
# finish moved by hand into its JCT.
WRONG_JOBS: dict[str, tuple[Callable[[pd.DataFrame], pd.DataFrame], str]] = {
    "twice": (lambda frame: pd.concat([frame, frame.iloc[[0]]], ignore_index=True), "more than one row for p0"),
    "stranger": (lambda frame: pd.concat([frame, frame.iloc[[0]].assign(pipeline_id="ghost")], ignore_index=True),
                 "a row for ghost, which the log never registered"),
    "finish": (lambda frame: frame.assign(finish_s=frame["finish_s"] + 100.0, jct_s=frame["jct_s"] + 100.0),
               "p0's finish_s is "),
    "unfinished": (lambda frame: frame.assign(finish_s=None, jct_s=None), "p0's finish_s is empty, but the log removes it"),
    "jct": (lambda frame: frame.assign(jct_s=frame["jct_s"] - 5.0), "p0's jct_s is "),
    "arrival": (lambda frame: frame.assign(arrival_s=frame["arrival_s"] + 2.0), "p0's arrival_s is 2.0, but the log admits it"),
    "queueing": (lambda frame: frame.assign(queueing_s=frame["queueing_s"] + 1.0), "p0's queueing_s is "),
    "slowdown": (lambda frame: frame.assign(alone_s=50.0, slowdown=1.0), "p0's slowdown is 1.0, but jct_s / alone_s"),
}


@pytest.mark.parametrize("wrong", sorted(WRONG_JOBS))
def test_check_sees_job_rows_the_log_contradicts(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 wrong: str) -> None:
    folder = _copy(run_dir, tmp_path)
    edit, message = WRONG_JOBS[wrong]
    _edit_table(folder, "jobs", edit)
    assert message in _check_fails(folder, "jobs", capsys)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A whole simulator run (no plots)."""
    out = tmp_path_factory.mktemp("tiny") / "run"
    assert sim_main(["run", "tiny", "--no-alone", "--quiet", "--out", str(out)]) == 0
    return out


def test_check_sees_a_simulated_holding_deleted(tiny_run: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    folder = _copy(tiny_run, tmp_path)
    assert run_cli_main("check", str(folder)) == 0
    # The last training holding, all its GPUs (every grant the simulator made was applied).
    def drop_last_holding(frame: pd.DataFrame) -> pd.DataFrame:
        last = frame[frame["dp_rank"] < 0].iloc[-1]
        same = (frame["pipeline_id"] == last["pipeline_id"]) & (frame["cluster"] == last["cluster"]) & (
            frame["t_start"] == last["t_start"])
        return frame[~same]

    _edit_table(folder, "allocations", drop_last_holding)
    _check_fails(folder, "allocations", capsys)


def _cut(folder: Path, keep: int) -> None:
    events = folder / "events.jsonl"
    lines = events.read_text().splitlines()
    events.write_text("\n".join(lines[:keep]) + "\n")


@pytest.mark.parametrize("lost", [1, 2, 5, 30])
def test_replay_sees_a_log_cut_short(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     lost: int) -> None:
    folder = _copy(run_dir, tmp_path)
    events = folder / "events.jsonl"
    keep = len(events.read_text().splitlines()) - lost
    _cut(folder, keep)
    with pytest.raises(RunError, match=rf"events.jsonl, line {keep}: .*the log was cut short"):
        replay(folder)
    assert run_cli_main("replay", str(folder)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlix-sim: error: {events}, line {keep}: ") and err.count("\n") == 1


@pytest.mark.parametrize("lost", [1, 5, 30])
def test_check_says_what_replay_says_of_a_log_cut_short(run_dir: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str], lost: int) -> None:
    """check held the tables to a log cut short as if it were whole: a broken invariant or a
    table that disagreed (exit 1), or, with few lines lost, a pass."""
    folder = _copy(run_dir, tmp_path)
    events = folder / "events.jsonl"
    _cut(folder, len(events.read_text().splitlines()) - lost)
    said = []
    for command in ("replay", "check"):
        capsys.readouterr()
        assert run_cli_main(command, str(folder)) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1
        said.append(captured.err)
    assert said[0] == said[1] and "the log was cut short" in said[0]


def test_replay_names_the_line_a_log_was_cut_in(run_dir: Path, tmp_path: Path) -> None:
    folder = _copy(run_dir, tmp_path)
    events = folder / "events.jsonl"
    text = events.read_text()
    events.write_text(text[: len(text) - 30])  # the last line loses its end
    with pytest.raises(RunError, match=rf"{events}, line {text.count(chr(10))}: not JSON"):
        replay(folder)


def test_replay_sees_a_summary_of_more_than_the_log(run_dir: Path, tmp_path: Path) -> None:
    folder = _copy(run_dir, tmp_path)
    summary_file = folder / "summary.json"
    summary = json.loads(summary_file.read_text())
    summary["pipelines"]["p1"]["steps"] += 1
    summary_file.write_text(json.dumps(summary))
    with pytest.raises(RunError, match="the log finishes 1 step.* of p1, summary.json counts 2"):
        replay(folder)


@pytest.mark.parametrize("duration_s", ["5", "80"])
def test_a_run_cut_short_on_purpose_replays_and_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       duration_s: str) -> None:
    out = tmp_path / "run"
    assert sim_main(["run", "tiny", "--duration-s", duration_s, "--no-alone", "--quiet", "--out", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["finished"] is False
    assert replay(out).identical
    check(out)
    # Cut short once more, by hand: what its summary counts (steps, the grants it counts
    # waits for) is gone.
    _cut(out, 5)
    with pytest.raises(RunError, match="line 5: the log .*, summary.json counts .*; the log was cut short"):
        replay(out)


BAD_HEADERS: dict[str, Callable[[dict[str, Any]], object]] = {
    "no topology": lambda head: head.pop("topology"),
    "topology.num_nodes=0: must be a positive integer": lambda head: head["topology"].update(num_nodes=0),
    "policy='nope': unknown policy": lambda head: head.update(policy="nope"),
    "policy is a number (3), not a name": lambda head: head.update(policy=3),
    "config is an array, not an object": lambda head: head.update(config=[]),
    "config.retry_backoff_s=-1: must be a finite number >= 0": lambda head: head["config"].update(retry_backoff_s=-1),
    "unexpected keyword argument 'speed'": lambda head: head["config"].update(speed=2),
}


@pytest.mark.parametrize("problem", sorted(BAD_HEADERS))
def test_check_and_replay_say_the_same_of_a_bad_header(run_dir: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str], problem: str) -> None:
    folder = _copy(run_dir, tmp_path)
    events = folder / "events.jsonl"
    lines = events.read_text().splitlines()
    header = json.loads(lines[0])
    BAD_HEADERS[problem](header["header"])
    events.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    said = []
    for command in ("check", "replay"):
        capsys.readouterr()
        assert run_cli_main(command, str(folder)) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1
        said.append(captured.err)
    assert said[0] == said[1]
    assert said[0].startswith(f"rlix-sim: error: {events}, line 1: bad header: ") and problem in said[0]


def test_a_library_caller_catches_the_disagreement_from_rlix_runs(run_dir: Path, tmp_path: Path) -> None:
    """`rlix.runs.check` raises TableMismatch, importable beside it, naming the table."""
    from rlix.runs import TableMismatch

    folder = _copy(run_dir, tmp_path)
    _edit_table(folder, "steps", lambda frame: frame.iloc[:0])
    with pytest.raises(TableMismatch) as caught:
        check(folder)
    assert caught.value.table == "steps"


# Times the log contradicts: a step's end, a wait's request or grant moved by hand (rows and
# counts as they were). rlix-sim jobs read a moved grant as 100 s more training wait.
MOVED_TIMES: dict[str, tuple[str, Callable[[pd.DataFrame], pd.DataFrame], str]] = {
    "step end": ("steps", lambda frame: frame.assign(t_end=frame["t_end"] + 0.5),
                 "ends at t_end="),
    "grant late": ("waits", lambda frame: frame.assign(t_grant=frame["t_grant"] + 100.0),
                   "but no grant of it the log applied was decided by then and held until then"),
    "grant early": ("waits", lambda frame: frame.assign(t_grant=frame["t_request"] - 1.0),
                    "but no grant of it the log applied was decided by then"),
    "request": ("waits", lambda frame: frame.assign(t_request=frame["t_request"] + 0.25),
                "but the log has no request of it then"),
}


@pytest.mark.parametrize("moved", sorted(MOVED_TIMES))
def test_check_sees_times_the_log_contradicts(tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             moved: str) -> None:
    folder = _copy(tiny_run, tmp_path)
    table, edit, message = MOVED_TIMES[moved]
    _edit_table(folder, table, edit)
    assert message in _check_fails(folder, table, capsys)


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny with lora killed at 80 s, mid-rollout: its open trajectories end aborted then."""
    from rlix.scenarios import load_scenario

    data = load_scenario("tiny").model_dump(mode="json", exclude_none=True)
    data["faults"] = {"events": [{"at_s": 80.0, "kill": "lora"}]}
    scenario = tmp_path_factory.mktemp("killed") / "killed.yaml"
    scenario.write_text(json.dumps(data))  # JSON is YAML
    out = scenario.parent / "run"
    assert sim_main(["run", str(scenario), "--no-alone", "--quiet", "--out", str(out)]) == 0
    return out


def _as_text(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    frame["status"] = frame["status"].astype(str)
    return frame


def test_check_sees_a_trajectory_lost_as_aborted(killed_run: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Invariant 8 as the log tells it: the table alone takes an aborted trajectory for one
    whose pipeline went away. lora's, aborted at its kill, agree with the log; one of ft's,
    completed at 63.7 s and marked aborted, was lost (ft ran to its end), as is one of lora's
    aborted 20 s before the kill."""
    assert run_cli_main("check", str(killed_run)) == 0
    rollouts = pd.read_parquet(killed_run / "rollouts.parquet")
    assert set(rollouts.loc[rollouts["status"] == "aborted", "t_start"]) == {80.0}

    def ft_lost(frame: pd.DataFrame) -> pd.DataFrame:
        frame = _as_text(frame)
        last = frame[(frame["pipeline_id"] == "ft") & (frame["status"] == "completed")].index[0]
        frame.loc[last, "status"] = "aborted"
        return frame

    def lora_early(frame: pd.DataFrame) -> pd.DataFrame:
        """The first aborted trajectory closed just after its last attempt began, before the kill."""
        frame = _as_text(frame)
        first = frame[frame["status"] == "aborted"].index[0]
        same = frame[["pipeline_id", "adapter", "trajectory_id"]].eq(
            frame.loc[first, ["pipeline_id", "adapter", "trajectory_id"]]).all(axis=1)
        t = frame.loc[same & (frame["status"] != "aborted"), "t_start"].max() + 0.1
        assert t < 80.0 - CLOSE_TOL_S
        frame.loc[first, ["t_start", "t_end"]] = t
        return frame

    for edit, who in ((ft_lost, "ft/base"), (lora_early, "lora/")):
        folder = _copy(killed_run, tmp_path / edit.__name__)
        _edit_table(folder, "rollouts", edit)
        out = _check_fails(folder, "rollouts", capsys)
        assert who in out and "neither removed nor the run cut or ended: a trajectory lost (invariant 8)" in out, out
