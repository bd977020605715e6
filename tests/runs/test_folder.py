"""write_run and load: every file of the run folder, tables that read back as written."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rlix.policy import PolicyConfig, Topology
from rlix.runs import Recorder, RunError, load, summary, write_run
from rlix.runs.plots import PLOT_FILES
from rlix.traces import TABLE_NAMES
from tests.runs.conftest import SCENARIO
from tests.runs.fake_run import two_pipeline_run

EXPECTED = {"summary.json", "scenario.yaml", "events.jsonl", "timeline.json", *PLOT_FILES,
            *(f"{name}.parquet" for name in TABLE_NAMES), "jobs.parquet"}


def _recorded(recorder: Recorder) -> dict[str, pd.DataFrame]:
    """The recorder's tables built here, independently of rlix.runs.frames."""
    from rlix.runs.recorder import ACTIVITY_COLUMNS, ALLOCATION_COLUMNS, WAIT_COLUMNS

    return {
        "allocations": pd.DataFrame(recorder.allocations, columns=list(ALLOCATION_COLUMNS)),
        "activity": pd.DataFrame(recorder.activity, columns=list(ACTIVITY_COLUMNS)),
        "waits": pd.DataFrame(recorder.waits, columns=list(WAIT_COLUMNS)),
        "steps": pd.DataFrame(recorder.steps),
        "rollouts": pd.DataFrame(recorder.rollouts),
    }


def _same_table(got: pd.DataFrame, want: pd.DataFrame) -> None:
    assert set(want.columns) <= set(got.columns)
    assert len(got) == len(want)
    for column in want.columns:
        assert got[column].astype(object).tolist() == want[column].astype(object).tolist(), column


def test_folder_has_every_file(run_dir: Path) -> None:
    assert {p.name for p in run_dir.iterdir()} == EXPECTED
    assert not [p for p in run_dir.parent.iterdir() if p.name.startswith(".")]  # no staging left


def test_load_round_trips_every_table(run_dir: Path, recorder: Recorder) -> None:
    run = load(run_dir)
    for name, want in _recorded(recorder).items():
        _same_table(getattr(run, name), want)
    assert run.scenario == SCENARIO
    ended = {"finished": True, "stop_reason": None, "faults": []}  # a run without a run_state finished
    assert run.summary == json.loads(json.dumps({**summary(recorder), **ended}))
    assert (run.policy, run.topology, run.config) == ("rlix", Topology(1, 4), PolicyConfig())
    assert sorted(run.specs) == ["p0", "p1"]
    events = list(run.events())
    assert len(events) == len(recorder.event_lines) - 1
    assert events[0]["event"]["type"] == "PipelineRegistered"
    assert {**summary(run.tables()), **ended} == run.summary


def test_csv_tables_round_trip(tmp_path: Path, recorder: Recorder) -> None:
    out = write_run(recorder, tmp_path / "csv", scenario_yaml=SCENARIO, format="csv", plots=False)
    assert {p.suffix for p in out.iterdir() if p.stem in TABLE_NAMES} == {".csv"}
    run = load(out)
    for name, want in _recorded(recorder).items():
        _same_table(getattr(run, name), want)


def test_timeline_is_a_chrome_trace(run_dir: Path, recorder: Recorder) -> None:
    trace = json.loads((run_dir / "timeline.json").read_text())
    events = trace["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert {e["ph"] for e in events} == {"X", "M"}
    for e in slices:
        assert {"name", "pid", "tid", "ts", "dur"} <= set(e)
        assert e["dur"] >= 0
    holdings = [e for e in slices if e["cat"] == "holding"]
    assert len(holdings) == len(recorder.allocations)
    first = recorder.allocations[0]  # microseconds, named by pipeline, one track per GPU
    assert any(e["name"] == first[0] and e["tid"] == first[4] and e["ts"] == first[5] * 1e6
               and e["dur"] == (first[6] - first[5]) * 1e6 for e in holdings)
    stages = {e["name"] for e in slices if e["cat"] in ("busy", "loading")}
    assert stages == {"init", "rollout", "actor_train", "load"}
    steps = [e for e in slices if e["cat"] == "step"]
    assert sorted((e["args"]["pipeline_id"], e["name"]) for e in steps) == [
        ("p0", "step 0"), ("p0", "step 1"), ("p1", "step 0")]


def test_plots_are_png(run_dir: Path) -> None:
    for name in PLOT_FILES:
        data = (run_dir / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000, name


def test_refuses_a_non_empty_folder_unless_overwrite(tmp_path: Path, recorder: Recorder) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    for overwrite in (False, True):  # not written by rlix: never replaced
        with pytest.raises(RunError, match="not an rlix run folder"):
            write_run(recorder, out, scenario_yaml=SCENARIO, plots=False, overwrite=overwrite)
    assert (out / "keep.txt").exists()
    (out / "keep.txt").unlink()
    write_run(recorder, out, scenario_yaml=SCENARIO, plots=False)
    with pytest.raises(RunError, match="not empty"):
        write_run(recorder, out, scenario_yaml=SCENARIO, plots=False)
    (out / "extra.txt").write_text("x")
    write_run(recorder, out, scenario_yaml=SCENARIO, plots=False, overwrite=True)
    assert not (out / "extra.txt").exists() and (out / "events.jsonl").exists()


def test_bad_requests_write_nothing(tmp_path: Path) -> None:
    recorder = two_pipeline_run()
    with pytest.raises(RunError, match="not 'xlsx'"):
        write_run(recorder, tmp_path / "a", scenario_yaml="", format="xlsx", plots=False)  # type: ignore[arg-type]
    (tmp_path / "file").write_text("")
    with pytest.raises(RunError, match="not a folder"):
        write_run(recorder, tmp_path / "file", scenario_yaml="", plots=False)
    unfinished = Recorder(Topology(1, 2), "rlix", PolicyConfig())
    unfinished._open[("p0", "actor_train", -1)] = (1, (0,), 0.0)
    with pytest.raises(RunError, match="not finished"):
        write_run(unfinished, tmp_path / "b", scenario_yaml="", plots=False)
    recorder.rollouts["status"][0] = "lost"
    with pytest.raises(ValueError, match="status 'lost'"):
        write_run(recorder, tmp_path / "c", scenario_yaml="", plots=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_load_errors_are_one_line(tmp_path: Path, run_dir: Path) -> None:
    with pytest.raises(RunError, match="no such run folder"):
        load(tmp_path / "missing")
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(RunError, match="a file, not a run folder"):
        load(tmp_path / "a_file")
    (tmp_path / "a_file").unlink()
    with pytest.raises(RunError, match="no events.jsonl"):
        load(tmp_path)
    (tmp_path / "events.jsonl").write_text('{"event": {}}\n')
    with pytest.raises(RunError, match="line 1: the first line is not the header") as error:
        load(tmp_path)
    assert "\n" not in str(error.value)
    (tmp_path / "events.jsonl").write_text((run_dir / "events.jsonl").read_text())
    with pytest.raises(RunError, match="summary.json: missing"):
        load(tmp_path)


def test_compare_plot(run_dir: Path, tmp_path: Path) -> None:
    from rlix.runs.compare_plot import compare_runs

    out = compare_runs([run_dir, run_dir], tmp_path / "compare.png")
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 5000
    with pytest.raises(ValueError, match="1 labels for 2 runs"):
        compare_runs([run_dir, run_dir], tmp_path / "x.png", labels=["one"])


@pytest.mark.parametrize("slice_rows", [1, 2, 5])
def test_timeline_written_a_slice_at_a_time_is_the_same_file(
    tmp_path: Path, recorder: Recorder, monkeypatch: pytest.MonkeyPatch, slice_rows: int
) -> None:
    """Large runs' timelines are formatted and written a slice of rows at a time; slices of any
    size (cutting a pipeline's rows apart) give the very same bytes."""
    import rlix.runs.timeline as timeline
    from rlix.runs.frames import tables_from_recorder

    tables = tables_from_recorder(recorder)
    whole = timeline.write_timeline(tables, tmp_path / "whole.json").read_bytes()
    monkeypatch.setattr(timeline, "SLICE_ROWS", slice_rows)
    assert timeline.write_timeline(tables, tmp_path / "sliced.json").read_bytes() == whole
    json.loads(whole)


def test_the_run_folder_honours_the_umask(tmp_path: Path, recorder: Recorder) -> None:
    """Readable by the group and others under umask 022, as any folder the user makes."""
    import os

    previous = os.umask(0o022)
    try:
        out = write_run(recorder, tmp_path / "run", scenario_yaml=SCENARIO, plots=False)
    finally:
        os.umask(previous)
    assert out.stat().st_mode & 0o777 == 0o755
    assert {p.stat().st_mode & 0o777 for p in out.iterdir()} == {0o644}


def test_a_folder_of_run_folders_names_them(tmp_path: Path, run_dir: Path) -> None:
    """A compare folder holds a run folder per policy; read as a run it says which they are."""
    for name in ("rlix", "static"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "events.jsonl").write_text((run_dir / "events.jsonl").read_text())
    (tmp_path / "compare.png").write_text("")
    with pytest.raises(RunError, match="not a run folder, but it holds run folders: rlix, static$"):
        load(tmp_path)
