"""Stopping a live run without losing its record, piece by piece (no Ray): a signal waits for
a piece of the record to be whole in the copy and the journal, and for the run folder to be
written; the journal stays until the folder is written; a cut run's live folder is not thrown
away by a fresh run; a run stopped before its first poll keeps the clock of its cut."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlix.executor import live
from rlix.executor.journal import JOURNAL_FILE, JournalWriter, apply_cut, read_journal
from rlix.executor.run import ExecutorInputError
from rlix.executor.stops import RunStopped, Stops, stop_on_signals
from rlix.policy import PolicyConfig, Topology
from rlix.runs import Recorder
from tests.runs.fake_run import two_pipeline_run

TOPOLOGY = Topology(1, 4)


class Interrupted(Exception):
    """What the test's own SIGINT handler raises: a signal that was not held."""


@pytest.fixture
def own_sigint() -> Iterator[None]:
    def handler(signum: int, frame: Any) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGINT, handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _plan() -> Any:
    from rlix.scenarios import load_scenario

    return type("P", (), {"scenario": load_scenario("cpu-demo")})()


def _live(tmp_path: Path) -> Path:
    folder = tmp_path / ".run.live"
    JournalWriter(folder / JOURNAL_FILE, "scenario", "v").close()
    (folder / "models" / "p0").mkdir(parents=True)
    (folder / "models" / "p0" / "weights").write_text("trained")
    return folder


def test_a_signal_while_the_folder_is_written_waits_for_it(tmp_path: Path, own_sigint: None,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from rlix.runs import folder

    real = folder.write_run

    def interrupted_write(*args: Any, **kwargs: Any) -> Path:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the tables and plots are written
        return real(*args, **kwargs)

    monkeypatch.setattr(folder, "write_run", interrupted_write)
    result = live.RunResult(None, {}, two_pipeline_run(), 1.0)
    live._write(result, tmp_path / "run", _plan(), overwrite=False, live=_live(tmp_path))
    assert (tmp_path / "run" / "summary.json").exists()
    assert (tmp_path / "run" / "models" / "p0" / "weights").read_text() == "trained"
    assert not (tmp_path / ".run.live").exists() and not (tmp_path / "run" / JOURNAL_FILE).exists()


def test_the_journal_stays_until_the_folder_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlix.runs import folder

    def broken_write(*args: Any, **kwargs: Any) -> Path:
        raise ValueError("a bug in a plot")

    monkeypatch.setattr(folder, "write_run", broken_write)
    result = live.RunResult(None, {}, two_pipeline_run(), 1.0)  # finished: no journal needed after
    with pytest.raises(ValueError, match="a bug in a plot"):
        live._write(result, tmp_path / "run", _plan(), overwrite=False, live=_live(tmp_path))
    assert (tmp_path / ".run.live" / JOURNAL_FILE).exists()  # the run can still be resumed
    assert (tmp_path / ".run.live" / "models" / "p0" / "weights").exists()


def test_a_signal_while_a_piece_is_taken_waits_for_it_to_be_journaled(tmp_path: Path, own_sigint: None) -> None:
    with stop_on_signals() as stops:
        copy = live._Copy(Recorder(TOPOLOGY, "rlix", PolicyConfig()), stops=stops)
        copy.journal = JournalWriter(tmp_path / JOURNAL_FILE, "scenario", "v")
        real = copy.recorder.extend

        def extend_then_signal(piece: dict[str, Any]) -> None:
            real(piece)
            os.kill(os.getpid(), signal.SIGINT)

        copy.recorder.extend = extend_then_signal  # type: ignore[method-assign]
        stops.on()
        piece = two_pipeline_run().since(copy.recorder.cursor())
        with pytest.raises(RunStopped):
            copy.take({"record": piece, "now": 80.0})
        stops.off()
        copy.journal.close()
    journal = read_journal(tmp_path / JOURNAL_FILE, TOPOLOGY, "rlix", PolicyConfig())
    assert journal.recorder.cursor() == copy.recorder.cursor()  # the piece is in both or neither


def test_stops_hold_a_signal_only_while_asked() -> None:
    stops = Stops()
    stops.on()
    with pytest.raises(RunStopped, match="SIGTERM"), stops.held():
        stops(signal.SIGTERM, None)  # held: raised at the end of the block, not here
        held_to_the_end = True
    assert held_to_the_end
    stops.off()
    with stops.held():
        stops(signal.SIGINT, None)  # off: ignored, then and after
    stops.on()  # nothing was held


def test_a_fresh_run_does_not_throw_away_a_cut_runs_live_folder(tmp_path: Path) -> None:
    folder = _live(tmp_path)
    with pytest.raises(ExecutorInputError, match="rlix-exec resume"):
        live._live_folder(tmp_path / "run", fresh=True)
    assert (folder / JOURNAL_FILE).exists()
    assert live._live_folder(tmp_path / "run", fresh=True, overwrite=True) == folder and not folder.exists()
    (folder / "models").mkdir(parents=True)  # an attempt that never journaled: nothing to resume
    live._live_folder(tmp_path / "run", fresh=True)
    assert not folder.exists()


def test_a_resumed_run_stopped_before_its_first_poll_ends_at_its_cut() -> None:
    recorder = Recorder(TOPOLOGY, "rlix", PolicyConfig())
    recorder.extend(two_pipeline_run().since(recorder.cursor()))
    apply_cut(recorder, at_s=75.0, restarts={}, resumed={})
    stopped, _status = live._stopped_record(live._Copy(recorder), "stopped (SIGTERM)")
    assert stopped.end_s == 75.0


def test_a_trajectory_requeued_just_before_a_stop_ends_aborted_at_the_cut() -> None:
    """A stop signal that lands after a trajectory was re-queued and before it ran again: the
    stopped pipeline's record closes it as aborted, so its folder holds invariant 8 (it was
    "re-queued and never finished"); a pipeline that had finished is left as it was."""
    from rlix.policy.run_checks import check_rollouts
    from tests.runs.fake_run import specs

    recorder = Recorder(TOPOLOGY, "rlix", PolicyConfig())
    recorder.extend(two_pipeline_run().since(recorder.cursor()))
    recorder.add_rollouts({
        "pipeline_id": ["p1", "p1"], "adapter": ["a0", "a0"], "trajectory_id": [7, 8],
        "step_consumed": [1, 1], "weight_version": [1, 1], "prompt_tokens": [20, 20],
        "response_tokens": [30, 40], "t_start": [70.0, 70.0], "t_end": [72.0, 72.0],
        "preemptions": [1, 1], "status": ["requeued", "requeued"], "dp_rank": [2, 3],
        "recomputed_tokens": [0, 0]})
    copy = live._Copy(recorder, progress={"now": 74.0, "pipelines": {
        "p0": {"status": "finished"}, "p1": {"status": "running"}}})
    stopped, status = live._stopped_record(copy, "stopped (SIGTERM)")
    assert status["p1"]["status"] == "stopped"
    rows = [dict(zip(stopped.rollouts, values, strict=True)) for values in zip(*stopped.rollouts.values(), strict=True)]
    last = {(r["pipeline_id"], r["trajectory_id"]): r for r in rows}
    assert [(last[("p1", t)]["status"], last[("p1", t)]["t_end"]) for t in (7, 8)] == [("aborted", 74.0)] * 2
    assert last[("p0", 1)]["status"] == "completed"
    check_rollouts(rows, specs())


def test_a_stop_swallowed_where_it_landed_is_raised_again() -> None:
    stops = Stops()
    stops.check()  # nothing raised: nothing to raise again
    stops.on()
    stops.check()
    try:
        stops(signal.SIGTERM, None)
    except RunStopped:
        pass  # as Ray's C++ core does with what a handler raises while it waits
    with pytest.raises(RunStopped, match=r"stopped \(SIGTERM\)"):
        stops.check()
    stops.off()
    stops.check()  # the run is over: a stop is no longer raised


def test_a_run_whose_stop_ray_swallowed_in_the_launch_stops_before_it_drives(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlix.executor import api

    stops = Stops()

    def launch_that_swallows(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        try:
            stops(signal.SIGTERM, None)  # the signal lands in Ray's code, which goes on
        except Exception:  # noqa: BLE001 - what the library does, not what rlix does
            pass
        return object(), object()

    def drive(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the run went on after its stop")

    monkeypatch.setattr(api, "launch_orchestrator", launch_that_swallows)
    monkeypatch.setattr(live, "_get", lambda ref: ref)
    monkeypatch.setattr(live, "node_map", lambda pool: [])
    monkeypatch.setattr(live, "_drive", drive)
    monkeypatch.setattr(live, "_last_word", lambda handle, copy: None)
    monkeypatch.setattr(live, "_shut_down", lambda handle, started, num_nodes: None)
    the_plan = type("P", (), {"scenario": _plan().scenario, "topology": TOPOLOGY})()
    copy = live._Copy(Recorder(TOPOLOGY, "rlix", PolicyConfig()), stops=stops)
    result = live._run(the_plan, copy, None, True, False, None, False, stops)
    assert result.by_signal and result.stop_reason == "stopped (SIGTERM)"
    assert not result.finished
