"""`rlix-exec resume`: a run whose driver was SIGKILLed goes on from its checkpoints in the same
folder and ends as a whole run (full step counts, no trajectory lost or consumed twice,
staleness held, replay identical); bad input is one line and changes nothing."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("ray")
pytest.importorskip("transformers")

from tests.executor.child_env import child_env  # noqa: E402
from tests.executor.demos import SHORT_DEMO_STEPS, short_demo_file  # noqa: E402

RLIX_EXEC = [sys.executable, "-m", "rlix.executor.cli"]


def _resume(home: Path, run: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RLIX_EXEC, "resume", str(run), "--quiet"], env=child_env(home), capture_output=True,
                          text=True, timeout=600)


def _sigkilled_run(tmp_path: Path) -> tuple[Path, Path]:
    """The short cpu-demo (a checkpoint every 2 steps) with its driver SIGKILLed as soon as its
    journal holds ft's first checkpointed step: the resume then starts ft from that checkpoint.
    Not a fixed time after the checkpoint appears: ft's steps take a fraction of a second
    here, and a CI run's ft had done all six before a 2-s wait ended (it was not resumed)."""
    run, live = tmp_path / "run", tmp_path / ".run.live"
    scenario = short_demo_file(tmp_path)
    driver = subprocess.Popen([*RLIX_EXEC, "run", str(scenario), "--quiet", "--out", str(run)], env=child_env(tmp_path),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while _ft_steps_in_the_journal(live / "journal.jsonl") < 2 or not list((live / "checkpoints" / "ft").glob("ckpt-*")):
        assert driver.poll() is None, driver.communicate()[0]
        assert time.monotonic() < deadline, "ft's first checkpointed step was not journaled within 300 s"
        time.sleep(0.1)
    driver.send_signal(signal.SIGKILL)
    driver.wait(timeout=30)
    assert not run.exists() and (live / "journal.jsonl").exists()
    assert _ft_steps_in_the_journal(live / "journal.jsonl") < SHORT_DEMO_STEPS, "ft ended before the kill"
    _wait_for_the_cut_runs_workers(live)
    return run, live


def _ft_steps_in_the_journal(journal: Path) -> int:
    """ft's train steps in the journal's newest progress line (0 before there is one)."""
    if not journal.exists():
        return 0
    for line in reversed(journal.read_text(encoding="utf-8").splitlines()):
        try:
            piece = json.loads(line)
        except ValueError:  # the line being written
            continue
        if "progress" in piece:
            return int(piece["progress"].get("steps", {}).get("ft", 0))
    return 0


def _wait_for_the_cut_runs_workers(live: Path) -> None:
    """The killed driver's Ray workers live on for seconds; a resume waits for them (tested
    here through the journal's owner line), and so does this test before it lists files, by
    the resume's own wait: on a loaded machine they have outlived a minute (the raylet they
    wait on was orphaned too), and after `STRAGGLER_WAIT_S` a resume ends them."""
    from rlix.executor.resume import _wait_for_stragglers, _workers_of

    journal = live / "journal.jsonl"
    owners = [json.loads(line)["owner"] for line in journal.read_text().splitlines() if line.startswith('{"owner"')]
    assert owners and owners[-1]["raylet_pids"], "the journal names the run's raylet"
    _wait_for_stragglers(owners[-1], journal)
    assert not _workers_of({str(p) for p in owners[-1]["raylet_pids"]}), "the cut run's workers outlived a kill"


def test_a_sigkilled_run_resumes_to_a_whole_run(tmp_path: Path) -> None:
    from rlix.runs.verify import check, replay

    run, live = _sigkilled_run(tmp_path)
    cut = sorted((live / "checkpoints" / "ft").glob("ckpt-*"))
    newest = cut[-1] / "checkpoint.json"
    good = newest.read_text()
    newest.write_text("{broken")  # a damaged checkpoint: one line, nothing changed
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if ".ray" not in p.parts)
    refused = _resume(tmp_path, run)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        f"rlix-exec: error: {newest}: not a readable checkpoint "
        "(Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"], refused.stderr
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if ".ray" not in p.parts) == before
    newest.write_text(good)

    resumed = _resume(tmp_path, run)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["finished"] is True
    steps = pd.read_parquet(run / "steps.parquet")
    per_adapter = steps.groupby(["pipeline_id", "adapter"]).step
    assert per_adapter.nunique().to_dict() == {("ft", "base"): SHORT_DEMO_STEPS, ("lora", "a0"): SHORT_DEMO_STEPS,
                                              ("lora", "a1"): SHORT_DEMO_STEPS}
    assert (per_adapter.count() == per_adapter.nunique()).all()  # redone steps counted once
    num_allocations, num_attempts = check(run)  # nothing lost or consumed twice, staleness held
    assert num_allocations > 0 and num_attempts > 0
    assert replay(run).identical
    events = (run / "events.jsonl").read_text().splitlines()
    (segment,) = [json.loads(line)["segment"] for line in events if line.startswith('{"segment"')]
    # The newest checkpoint, unless the kill fell between writing it and recording its step:
    # then the record never reached it, and the one before is the resume point (a resume from
    # it would skip a step the record does not have).
    assert segment["resumed"]["ft"] in {path.name for path in cut[-2:]}, (segment, [path.name for path in cut])
    assert (run / "models" / "ft" / "model.safetensors").exists()
    assert not live.exists() and not (run / "journal.jsonl").exists()

    again = _resume(tmp_path, run)  # finished: nothing to resume
    assert again.returncode == 2 and "the run finished; there is nothing to resume" in again.stderr


def test_bad_folders_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "keep.txt").write_text("x")
    for folder, words in ((tmp_path / "nothing", "no such run folder"),
                          (tmp_path / "data", "not an rlix run folder")):
        done = _resume(tmp_path, folder)
        assert done.returncode == 2 and words in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert (tmp_path / "data" / "keep.txt").read_text() == "x"


def test_a_journal_of_another_version_is_refused(tmp_path: Path) -> None:
    from rlix.executor.journal import JournalWriter
    from rlix.scenarios import load_scenario

    live = tmp_path / ".run.live"
    writer = JournalWriter(live / "journal.jsonl", load_scenario("cpu-demo").to_yaml(), "0.0.1")
    writer.close()
    shutil.copy(live / "journal.jsonl", tmp_path / "journal.copy")
    done = _resume(tmp_path, tmp_path / "run")
    assert done.returncode == 2 and "written by rlix 0.0.1" in done.stderr
    assert (live / "journal.jsonl").read_bytes() == (tmp_path / "journal.copy").read_bytes()


def test_the_live_folder_given_for_its_run_names_the_run_to_resume(tmp_path: Path) -> None:
    """A SIGKILLed run leaves only `.run.live/` beside where its folder would be: given that,
    resume says which folder to give, and changes nothing."""
    from rlix.executor.journal import JournalWriter
    from rlix.scenarios import load_scenario

    live = tmp_path / ".run.live"
    writer = JournalWriter(live / "journal.jsonl", load_scenario("cpu-demo").to_yaml(), "0.0.1")
    writer.close()
    before = (live / "journal.jsonl").read_bytes()
    done = _resume(tmp_path, live)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"rlix-exec resume {tmp_path / 'run'}" in done.stderr, done.stderr
    assert (live / "journal.jsonl").read_bytes() == before and sorted(tmp_path.iterdir()) == [live]


@pytest.mark.parametrize("cut", [True, False])
def test_a_simulator_run_is_named_as_one(tmp_path: Path, cut: bool) -> None:
    """A simulator folder, cut short or finished, is refused as a simulator run (it read as a
    live run with no journal, or as one that finished), and kept as it was."""
    from rlix.sim.cli import main

    run = tmp_path / "sim"
    assert main(["run", "tiny", "--no-alone", "--quiet", "--out", str(run), *(["--duration-s", "5"] if cut else [])]) == 0
    before = sorted(p.name for p in run.iterdir())
    done = _resume(tmp_path, run)
    assert done.returncode == 2 and "a simulator run" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in run.iterdir()) == before
