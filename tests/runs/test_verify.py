"""replay and check on a written run folder, untouched and tampered with; the CLI commands."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from rlix.policy import InvariantViolation
from rlix.runs import RunError, check, replay
from tests.runs.run_cli import run_cli_main


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run_dir, tmp_path / "run"))


def _edit_line(path: Path, number: int, edit: object) -> None:
    lines = path.read_text().splitlines()
    record = json.loads(lines[number - 1])
    edit(record)  # type: ignore[operator]
    lines[number - 1] = json.dumps(record, separators=(",", ":"))
    path.write_text("\n".join(lines) + "\n")


def _first_line_with(path: Path, decision_type: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if f'"type":"{decision_type}"' in line and '"decisions":[{' in line:
            return number
    raise AssertionError(decision_type)


def test_untouched_run_replays_identically(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = replay(run_dir, check_invariants=True)
    num_lines = len((run_dir / "events.jsonl").read_text().splitlines())
    assert result.identical and result.num_events == num_lines - 1
    assert result.num_decisions > 20
    assert run_cli_main("replay", str(run_dir)) == 0
    assert capsys.readouterr().out.strip() == f"replayed {result.num_events} events, {result.num_decisions} decisions: identical"


def test_an_edited_decision_is_reported_at_its_line(run_dir: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    folder = _copy(run_dir, tmp_path)
    events = folder / "events.jsonl"
    number = _first_line_with(events, "Shrink")

    def edit(record: dict) -> None:  # type: ignore[type-arg]
        shrink = next(d for d in record["decisions"] if d["type"] == "Shrink")
        shrink["reason"] = "whim"

    _edit_line(events, number, edit)
    result = replay(folder)
    assert not result.identical and result.divergence is not None
    assert result.divergence.line == number
    assert result.num_events == number - 2  # the header and this line are not counted
    assert "field 'reason'" in result.divergence.detail and '"whim"' in result.divergence.detail
    assert run_cli_main("replay", str(folder)) == 1
    assert f"line {number}:" in capsys.readouterr().out


def test_a_dropped_decision_and_a_refused_event_diverge(run_dir: Path, tmp_path: Path) -> None:
    folder = _copy(run_dir, tmp_path)
    events = folder / "events.jsonl"
    number = _first_line_with(events, "Grant")
    _edit_line(events, number, lambda record: record["decisions"].pop())
    result = replay(folder)
    assert result.divergence is not None and result.divergence.line == number
    assert "decisions recorded" in result.divergence.detail
    _edit_line(events, 3, lambda record: record["event"].update(now=-5.0))  # time runs backwards
    result = replay(folder)
    assert result.divergence is not None and result.divergence.line == 3
    assert "refused" in result.divergence.detail


def test_unreadable_logs_are_one_line_errors(tmp_path: Path, run_dir: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RunError, match="no such run folder"):
        replay(tmp_path / "nowhere")
    folder = _copy(run_dir, tmp_path)
    events = folder / "events.jsonl"
    lines = events.read_text().splitlines()
    lines[4] = lines[4][:20]
    events.write_text("\n".join(lines) + "\n")
    with pytest.raises(RunError, match=r"events.jsonl, line 5: not JSON"):
        replay(folder)
    lines[4] = '{"event": {"type": "Nonsense", "now": 1.0}, "decisions": []}'
    events.write_text("\n".join(lines) + "\n")
    with pytest.raises(RunError, match="line 5: cannot decode the event: unknown event type 'Nonsense'"):
        replay(folder)
    assert run_cli_main("replay", str(folder)) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlix-sim: error: ") and err.count("\n") == 1


def test_check_passes_on_the_run_and_fails_on_an_overlap(run_dir: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    num_allocations, num_rollouts = check(run_dir)
    assert (num_allocations, num_rollouts) == (len(pd.read_parquet(run_dir / "allocations.parquet")), 6)
    assert run_cli_main("check", str(run_dir)) == 0
    folder = _copy(run_dir, tmp_path)
    table = pd.read_parquet(folder / "allocations.parquet")
    table.loc[0, "t_end"] = table["t_end"].max() + 5.0  # GPU held by two pipelines at once
    table.to_parquet(folder / "allocations.parquet")
    with pytest.raises(InvariantViolation, match="invariant 1"):
        check(folder)
    capsys.readouterr()
    assert run_cli_main("check", str(folder)) == 1
    assert "invariant 1 violated" in capsys.readouterr().out


def test_check_sees_a_stale_trajectory(run_dir: Path, tmp_path: Path) -> None:
    folder = _copy(run_dir, tmp_path)
    table = pd.read_parquet(folder / "rollouts.parquet")
    table.loc[0, "step_consumed"] = 5  # p0 is on-policy: version 0 cannot feed step 5
    table.to_parquet(folder / "rollouts.parquet")
    with pytest.raises(InvariantViolation, match="invariant 7"):
        check(folder)


def test_check_reads_rollouts_as_every_table_is_read(run_dir: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """check read the rollouts a pipeline at a time straight from Parquet, unconformed: a
    missing t_start was a TypeError traceback, a missing column pyarrow's own message."""
    folder = _copy(run_dir, tmp_path)
    path = folder / "rollouts.parquet"
    table = pd.read_parquet(path)
    table.loc[4, "t_start"] = None  # p1's second row, the file's fifth
    table.to_parquet(path)
    assert run_cli_main("check", str(folder)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"rlix-sim: error: {path}, row 5 (1-based), column 't_start': missing value (empty or NaN)\n"
    table.drop(columns=["status"]).to_parquet(path)
    assert run_cli_main("check", str(folder)) == 2
    assert capsys.readouterr().err.startswith(f"rlix-sim: error: {path}: rollouts table lacks required column(s) status")


@pytest.mark.parametrize("slice_rows", [1, 2])
def test_check_streams_rollouts_a_slice_at_a_time(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slice_rows: int
) -> None:
    """`check` turns the rollouts into rows a slice at a time (10^8-row tables), sorted by
    trajectory, whatever order the table is in: a trajectory whose attempts fall in different
    slices is judged as a whole, and one left re-queued is still caught."""
    import rlix.runs.verify as verify

    monkeypatch.setattr(verify, "CHECK_SLICE_ROWS", slice_rows)
    folder = _copy(run_dir, tmp_path)
    table = pd.read_parquet(folder / "rollouts.parquet")
    table.iloc[::-1].to_parquet(folder / "rollouts.parquet")  # attempts in reverse order
    assert check(folder)[1] == len(table)
    # p0's trajectory 1: re-queued, then completed; make its last attempt a re-queue too.
    last = table.index[(table["pipeline_id"] == "p0") & (table["trajectory_id"] == 1)].max()
    table.loc[last, "status"] = "requeued"
    table.to_parquet(folder / "rollouts.parquet")
    with pytest.raises(InvariantViolation, match="invariant 8.*trajectory 1 was re-queued"):
        check(folder)


@pytest.mark.parametrize("batch_rows", [1, 1 << 22])
def test_check_reads_the_rollouts_a_batch_of_pipelines_at_a_time(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    batch_rows: int,
) -> None:
    """A filtered Parquet read scans the whole file, so `check` reads the rollouts once per
    batch of pipelines, not once per pipeline (a run of 1,044 jobs read its table 1,044
    times); the rows checked and an error's file row are the same either way."""
    import rlix.runs.verify as verify

    monkeypatch.setattr(verify, "CHECK_BATCH_ROWS", batch_rows)
    folder = _copy(run_dir, tmp_path)
    path = folder / "rollouts.parquet"
    table = pd.read_parquet(path)
    num_pipelines = table["pipeline_id"].nunique()
    assert num_pipelines > 1
    reads: list[object] = []
    read_parquet = pd.read_parquet

    def counted(source: object, *args: object, **kwargs: object) -> pd.DataFrame:
        if Path(str(source)).name == "rollouts.parquet" and kwargs.get("filters"):
            reads.append(kwargs["filters"])
        return read_parquet(source, *args, **kwargs)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(verify.pd, "read_parquet", counted)
    assert check(folder)[1] == len(table)
    assert len(reads) == (num_pipelines if batch_rows == 1 else 1)
    table.loc[4, "t_start"] = None  # p1's second row, the file's fifth
    table.to_parquet(path)
    assert run_cli_main("check", str(folder)) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (  # after any progress line
        f"rlix-sim: error: {path}, row 5 (1-based), column 't_start': missing value (empty or NaN)")


def test_replay_shows_its_progress_in_the_run_s_time(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A long replay (lab-day-256's takes 1.5 min, lab-day-1024's many more) reports how far
    it has come in the run's time, as the run itself did: lines at each tenth of the makespan
    on a log (stderr not a terminal); the verdict stays alone on stdout."""
    import rlix.runs.verify as verify

    monkeypatch.setattr(verify, "PROGRESS_EVERY_EVENTS", 1)
    seen: list[float] = []
    assert replay(run_dir, progress=seen.append).identical
    makespan_s = json.loads((run_dir / "summary.json").read_text())["makespan_s"]
    assert seen and seen == sorted(seen) and seen[-1] <= makespan_s
    assert run_cli_main("replay", str(run_dir)) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("replayed ") and "identical" in captured.out
    assert f"replay {run_dir.name}: " in captured.err and "sim s (" in captured.err


def test_check_shows_its_progress_in_rollout_rows(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """check's rollouts (3 min on lab-day-1024's 18.6M attempts) report the rows checked of
    the table's rows after each pipeline; the verdict stays alone on stdout."""
    seen: list[tuple[int, int]] = []
    num_rollouts = check(run_dir, lambda done, total: seen.append((done, total)))[1]
    num_pipelines = pd.read_parquet(run_dir / "rollouts.parquet")["pipeline_id"].nunique()
    assert len(seen) == num_pipelines and seen[-1] == (num_rollouts, num_rollouts)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    assert run_cli_main("check", str(run_dir)) == 0
    captured = capsys.readouterr()
    assert "its tables agree" in captured.out
    assert f"check {run_dir.name}: {num_rollouts}/{num_rollouts} attempts" in captured.err
