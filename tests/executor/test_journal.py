"""The journal of a live run read back after cuts: a line cut short by a kill, then written
after, and the resume lines that carry what a later resume needs (no Ray, no models)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from rlix.executor import resume
from rlix.executor.journal import JournalWriter, read_journal
from rlix.executor.run import Plan
from rlix.policy import PolicyConfig, Topology
from rlix.runs import Recorder
from tests.runs.fake_run import two_pipeline_run

TOPOLOGY = Topology(1, 4)


def _piece() -> dict[str, Any]:
    """The whole record of the two-pipeline run, as a driver's poll gets it."""
    return two_pipeline_run().since(Recorder(TOPOLOGY, "rlix", PolicyConfig()).cursor())


def _read(path: Path) -> Any:
    return read_journal(path, TOPOLOGY, "rlix", PolicyConfig())


def test_a_line_cut_by_a_kill_does_not_swallow_the_next_one(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    writer = JournalWriter(path, "scenario", "v")
    writer.write(_piece(), {"now": 75.0})
    writer.close()
    with path.open("a", encoding="utf-8") as handle:
        handle.write('{"record": {"event_li')  # the driver was SIGKILLed mid-line
    writer = JournalWriter(path, "", "v")  # what a resume does: reopen and say where it cut
    writer.resumed({"at_s": 75.0, "restarts": {}, "resumed": {}}, {}, [])
    writer.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [next(iter(json.loads(line))) for line in lines] == ["journal", "record", "resume"]
    journal = _read(path)  # and a second resume can read it
    assert journal.recorder.end_s == 75.0 and journal.progress == {}


def _two_segments(path: Path, at_s: float) -> None:
    """A run cut at `at_s` after both pipelines ended and resumed once: its journal says how
    they ended only in the progress before the cut, and the resume line."""
    writer = JournalWriter(path, "scenario", "v")
    ended = {"p0": {"pipeline_id": "p0", "status": "finished"},
             "p1": {"pipeline_id": "p1", "status": "killed", "error": "by the scenario"}}
    writer.write(_piece(), {"now": at_s, "pipelines": ended, "faults": [{"replaced": 1}]})
    writer.close()
    first = resume._continue(_plan(), _read(path), path.parent, path)[1]
    assert first.states == ended and first.faults == [{"replaced": 1}]


def _plan() -> Plan:
    """The plan's side of the two pipelines: both had ended, so only their ids are read."""
    setups: list[Any] = [type("Setup", (), {"pipeline_id": pid})() for pid in ("p0", "p1")]
    return Plan(scenario=None, topology=TOPOLOGY, setups=setups, arrivals={})


def test_a_second_resume_keeps_what_the_first_knew(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    _two_segments(path, 75.0)
    writer = JournalWriter(path, "", "v")  # the resumed run polls once, then is cut again
    writer.write(Recorder(TOPOLOGY, "rlix", PolicyConfig()).since((0,) * 7),
                 {"now": 90.0, "pipelines": {}, "faults": [{"replaced": 2}]})
    writer.close()
    second = resume._continue(_plan(), _read(path), tmp_path, path)[1]
    assert second.states["p1"] == {"pipeline_id": "p1", "status": "killed", "error": "by the scenario"}
    assert second.states["p0"]["status"] == "finished"
    assert second.faults == [{"replaced": 1}, {"replaced": 2}]
    assert second.recorder.end_s == 90.0


def test_a_resume_cut_before_its_first_poll_starts_where_the_last_one_did(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    _two_segments(path, 75.0)  # then cut again before a single poll
    second = resume._continue(_plan(), _read(path), tmp_path, path)[1]
    assert second.recorder.end_s == 75.0  # not 0: the clock stood at the first cut
    assert second.faults == [{"replaced": 1}]  # the faults before the first cut, once
    segments = [json.loads(line)["segment"]["at_s"] for line in second.recorder.event_lines
                if line.startswith('{"segment"')]
    assert segments == [75.0, 75.0]


def test_a_refused_resume_leaves_the_run_folder_as_it_was(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"finished": False}))
    JournalWriter(run / "journal.jsonl", "scenario", "0.0.1").close()
    (run / "checkpoints").mkdir()
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    with pytest.raises(resume.ResumeError, match="written by rlix 0.0.1"):
        resume.prepare_resume(run)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before


def test_the_resume_is_not_the_cut_runs_driver(tmp_path: Path) -> None:
    """In a container the resume can get the pid the killed driver had: that is not a live run."""
    pytest.importorskip("psutil")
    resume._wait_for_stragglers({"driver_pid": os.getpid(), "raylet_pids": []}, tmp_path / "journal.jsonl")


def test_a_driver_of_another_machine_is_not_looked_for_here(tmp_path: Path) -> None:
    """A run that joined a cluster with --address, its driver's machine lost, is resumed from
    another node: the pid the driver had there says nothing of this machine's processes (in
    containers it is often 1, alive everywhere)."""
    import socket

    pytest.importorskip("psutil")
    alive = os.getppid()
    (tmp_path / "journal.jsonl").write_text("{}\n")  # written once, by the driver now gone
    resume._wait_for_stragglers({"driver_pid": alive, "host": "elsewhere.invalid", "raylet_pids": []},
                                tmp_path / "journal.jsonl")
    with pytest.raises(resume.ResumeError, match=f"still going \\(driver pid {alive}\\)"):
        resume._wait_for_stragglers({"driver_pid": alive, "host": socket.gethostname(), "raylet_pids": []},
                                    tmp_path / "journal.jsonl")


def test_a_driver_of_another_machine_still_writing_its_journal_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume from another node while the run's driver still runs on its own: no pid can say
    so, but the driver appends to the journal at every poll. The resume refuses before it
    touches a file (it would next delete the checkpoints past the record's last point)."""
    import threading

    pytest.importorskip("psutil")
    monkeypatch.setattr(resume, "JOURNAL_QUIET_S", 1.5)
    journal = tmp_path / "journal.jsonl"
    journal.write_text("{}\n")
    stop = threading.Event()

    def driver() -> None:  # polls every half second, as rlix.executor.live does
        while not stop.wait(0.5):
            with journal.open("a") as lines:
                lines.write("{}\n")

    writer = threading.Thread(target=driver, daemon=True)
    writer.start()
    try:
        with pytest.raises(resume.ResumeError, match="still going \\(its driver on elsewhere.invalid wrote"):
            resume._wait_for_stragglers({"driver_pid": 1, "host": "elsewhere.invalid", "raylet_pids": []}, journal)
    finally:
        stop.set()
        writer.join()
