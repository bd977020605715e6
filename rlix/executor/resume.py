"""`rlix-exec resume RUN_DIR`: continue a cut live run from each pipeline's last checkpoint.

A run is cut by Ctrl-C or SIGTERM (it writes a partial run folder), by the death of its
orchestrator (the same), or by SIGKILL of its driver (nothing is written, but the hidden
`.RUN_DIR.live/` beside it holds the journal, checkpoints and models). Either way the journal
(rlix.executor.journal) holds the record up to the cut.

At the cut every actor is gone, so nothing the core believed about holdings is true any more:
the resumed run starts a fresh core (a segment line in `events.jsonl`; `rlix-sim replay`
starts a fresh core there too, so the whole record replays exactly) and starts again:

- each pipeline that was running: from its newest checkpoint (its trainers load it at init,
  the core hears which weight versions exist, its program starts at the checkpoint's next
  step; without a checkpoint, from step 0). The steps it redoes leave the steps table; its
  trajectories get new ids (those of the cut run stay in the rollouts table as they were).
  One whose newest checkpoint is of its last step (cut before it saved its models) has
  nothing to train: its program is empty, it starts no trainer, and its models are copied
  from that checkpoint (`Workload.models_from_checkpoint`);
- pipelines that had not arrived: at their arrival time (the clock goes on from the cut);
- pipelines that had ended (finished, failed, killed) stay ended.

Refused in one line, nothing changed (a partial run folder's journal and checkpoints stay in
it): a folder that is not a run, a run that finished, one without a journal, one written by
another version of rlix, a damaged checkpoint, or a driver still running. A run can be cut and
resumed again: each resume line in the journal carries what the run knew before it of the
pipelines it did not start again, and the faults it had survived.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import rlix
from rlix.executor.checkpoints import CheckpointError, list_checkpoints, read_checkpoint
from rlix.executor.journal import (
    JOURNAL_FILE,
    Journal,
    JournalError,
    JournalWriter,
    apply_cut,
    read_journal,
)
from rlix.executor.live import Cut, live_folder
from rlix.executor.run import Plan, plan
from rlix.executor.workload import PipelineSetup, ResumeFrom
from rlix.runs.eventlog import facts_from_lines
from rlix.runs.recorder import Recorder

#: What a written partial run folder holds of its live part (moved back beside it to resume).
LIVE_PARTS = (JOURNAL_FILE, "checkpoints", "models")


class ResumeError(ValueError):
    """A run that cannot be resumed (one line, naming the file)."""


def prepare_resume(run_dir: str | Path) -> tuple[Plan, Cut]:
    """The plan of what starts again and the cut record it continues (module docstring)."""
    run_dir = Path(run_dir)
    live, moved = _gather(run_dir)
    try:
        return _prepare(live)
    except BaseException:  # refused (or interrupted): the run's files go back as they were
        for origin, inside in reversed(moved):
            shutil.move(str(inside), str(origin))
        if moved and not any(live.iterdir()):
            live.rmdir()
        raise


def _prepare(live: Path) -> tuple[Plan, Cut]:
    journal_path = live / JOURNAL_FILE
    try:
        head = json.loads(journal_path.read_text(encoding="utf-8").split("\n", 1)[0])["journal"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ResumeError(f"{journal_path}: not an rlix journal") from None
    if head.get("rlix_version") != rlix.__version__:
        raise ResumeError(f"{journal_path}: written by rlix {head.get('rlix_version')}, this is {rlix.__version__}")
    from rlix.scenarios import ScenarioError
    from rlix.scenarios.load import parse_scenario

    try:
        the_plan = plan(parse_scenario(head["scenario_yaml"], file=str(journal_path)))
        scenario = the_plan.scenario
        journal = read_journal(journal_path, the_plan.topology, scenario.policy.name, scenario.policy_config())
    except (ScenarioError, JournalError) as error:
        raise ResumeError(str(error)) from None
    _wait_for_stragglers(journal.owner, journal_path)
    return _continue(the_plan, journal, live, journal_path)


#: How long a resume waits for a cut run's left-over Ray workers to exit before it kills them.
STRAGGLER_WAIT_S = 30.0


def _wait_for_stragglers(owner: dict[str, Any], journal_path: Path) -> None:
    """The cut run's processes must be gone before its files are touched: a SIGKILLed driver's
    Ray workers live on for seconds (until they notice their raylet is gone) and a pipeline
    actor among them could still write a checkpoint. A driver still alive is refused."""
    import socket

    import psutil

    from rlix.executor.session import process_alive

    host = owner.get("host")
    if host not in (None, socket.gethostname()):
        # The cut run's driver ran on another machine (a node of the cluster it joined): its
        # pids mean nothing here. A driver still running appends to the journal at every poll,
        # so a journal that grows is a run still going, found before any of its files is
        # touched (its checkpoints past the record's last point are deleted next).
        if _grows(journal_path, JOURNAL_QUIET_S):
            raise ResumeError(f"{journal_path}: its run is still going (its driver on {host} wrote to the "
                              f"journal within {JOURNAL_QUIET_S:g} s): stop it first")
        return
    driver = owner.get("driver_pid")
    # Not this process: in a container the resume can be given the dead driver's pid.
    if driver is not None and int(driver) != os.getpid() and process_alive(int(driver)):
        raise ResumeError(f"{journal_path}: its run is still going (driver pid {driver}): stop it first")
    raylets = {str(pid) for pid in owner.get("raylet_pids", [])}
    deadline = time.monotonic() + STRAGGLER_WAIT_S
    while raylets:
        left = _workers_of(raylets)
        if not left:
            return
        if time.monotonic() > deadline:
            for process in left:
                process.kill()
            psutil.wait_procs(left, timeout=10)
            return
        time.sleep(0.5)


#: How long a journal of a driver on another machine must stay unchanged to count as cut: a
#: running driver appends to it every poll (rlix.executor.live.POLL_S, half a second).
JOURNAL_QUIET_S = 3.0


def _grows(path: Path, within_s: float) -> bool:
    """Whether `path` changes (size or modification time) within `within_s` seconds."""
    def mark() -> tuple[int, int]:
        stat = path.stat()
        return stat.st_size, stat.st_mtime_ns

    first = mark()
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if mark() != first:
            return True
    return False


def _workers_of(raylets: set[str]) -> list[Any]:
    import psutil

    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("RAY_RAYLET_PID") in raylets:
                found.append(process)
        except psutil.Error:
            continue
    return found


def _gather(run_dir: Path) -> tuple[Path, list[tuple[Path, Path]]]:
    """The live folder of the cut run, with what a written partial run folder holds of it
    (and the moves that put it there, undone if the resume is refused)."""
    from rlix.runs.paths import is_run_folder, is_simulator_summary

    live = live_folder(run_dir)
    moved: list[tuple[Path, Path]] = []
    if run_dir.exists():
        if not run_dir.is_dir() or not is_run_folder(run_dir):
            origin = _run_of_live_folder(run_dir)
            if origin is not None:  # the hidden folder a SIGKILLed run leaves is what a user sees
                raise ResumeError(f"{run_dir}: the journal of a cut run, not the run; resume it with "
                                  f"`rlix-exec resume {origin}`")
            raise ResumeError(f"{run_dir}: not an rlix run folder")
        try:
            summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            summary = {"finished": False}  # no summary: cut before one was written
        if is_simulator_summary(summary):
            raise ResumeError(f"{run_dir}: a simulator run; rlix-exec resume continues a live run cut short "
                              "(run a simulation again with rlix-sim run)")
        finished = summary.get("finished", True) if isinstance(summary, dict) else False
        if finished:
            raise ResumeError(f"{run_dir / 'summary.json'}: the run finished; there is nothing to resume")
        found = [name for name in LIVE_PARTS if (run_dir / name).exists() and not (live / name).exists()]
        if JOURNAL_FILE in found or (live / JOURNAL_FILE).exists():
            live.mkdir(exist_ok=True)
            for name in found:  # beside it again, so a resume cut short keeps them too
                shutil.move(str(run_dir / name), str(live / name))
                moved.append((run_dir / name, live / name))
    if not run_dir.exists() and not live.exists():
        raise ResumeError(f"{run_dir}: no such run folder (nor {live.name} of a run cut before it was written)")
    if not (live / JOURNAL_FILE).exists():
        raise ResumeError(f"{run_dir if run_dir.exists() else live}: no {JOURNAL_FILE} to resume from "
                          "(not a cut live run)")
    return live, moved


def _run_of_live_folder(folder: Path) -> Path | None:
    """The run folder whose live folder (`live_folder`) `folder` is, if it is one holding a journal."""
    name = folder.name
    if not (name.startswith(".") and name.endswith(".live") and len(name) > len("..live")):
        return None
    origin = folder.parent / name[1:-len(".live")]
    if live_folder(origin).resolve() != folder.resolve() or not (folder / JOURNAL_FILE).is_file():
        return None
    return origin


def _continue(the_plan: Plan, journal: Journal, live: Path, journal_path: Path) -> tuple[Plan, Cut]:
    recorder, progress = journal.recorder, journal.progress
    facts = facts_from_lines(recorder.event_lines)
    described = progress.get("pipelines", {})
    states: dict[str, dict[str, Any]] = {}
    setups: list[PipelineSetup] = []
    restarts: dict[str, dict[str, int]] = {}
    resumed: dict[str, str | None] = {}
    stale: list[Path] = []
    for setup in the_plan.setups:
        pid = setup.pipeline_id
        if pid not in facts.specs:  # not arrived yet
            setups.append(setup)
        elif pid in facts.removed_s:  # ended: stays ended
            states[pid] = (described.get(pid) or journal.states.get(pid)
                           or {"pipeline_id": pid, "status": "ended", "error": "before a resume"})
        else:
            restarted, starts, checkpoint, unreached = _restart(setup, recorder, live)
            setups.append(restarted)
            restarts[pid] = starts
            resumed[pid] = checkpoint
            stale += unreached
    # Without a progress line since the last cut (or since the start), the clock stood there.
    at_s = float(progress.get("now", recorder.end_s))
    cut = {"at_s": at_s, "restarts": restarts, "resumed": resumed}
    faults = journal.faults + list(progress.get("faults", []))
    for path in stale:  # checkpoints past the resume point: the restarted run writes its own
        shutil.rmtree(path)
    apply_cut(recorder, at_s, restarts, resumed)
    writer = JournalWriter(journal_path, "", rlix.__version__)  # the journal exists: no head line
    writer.resumed(cut, states, faults)
    writer.close()
    return dataclasses.replace(the_plan, setups=setups), Cut(recorder, states, faults)


def _restart(setup: PipelineSetup, recorder: Recorder,
             live: Path) -> tuple[PipelineSetup, dict[str, int], str | None, list[Path]]:
    """A running pipeline started again from its newest checkpoint (or step 0 without one),
    and its checkpoints the record did not reach (to be removed)."""
    pid = setup.pipeline_id
    adapters = [a.name for a in setup.program.adapters]
    written = list_checkpoints(live / "checkpoints" / pid)
    checkpoints = _reached(written, recorder, pid)
    starts = dict.fromkeys(adapters, 0)
    next_checkpoint = 1
    if checkpoints:
        meta = read_checkpoint(checkpoints[-1])
        starts.update({a: int(meta["next_step"].get(a, 0)) for a in adapters})
        next_checkpoint = int(meta.get("sequence", len(checkpoints))) + 1
    columns = recorder.rollouts
    first_ids = dict.fromkeys(adapters, 0)
    for row_pid, adapter, trajectory in zip(columns["pipeline_id"], columns["adapter"], columns["trajectory_id"],
                                            strict=True):
        if row_pid == pid and adapter in first_ids:
            first_ids[adapter] = max(first_ids[adapter], int(trajectory) + 1)
    program = dataclasses.replace(setup.program, start_steps=tuple(starts.items()))
    resume = ResumeFrom(str(checkpoints[-1]) if checkpoints else None, first_ids, next_checkpoint)
    name = checkpoints[-1].name if checkpoints else None
    unreached = [path for path in written if path not in checkpoints]
    return dataclasses.replace(setup, program=program, resume=resume), starts, name, unreached


def _reached(checkpoints: list[Path], recorder: Recorder, pipeline_id: str) -> list[Path]:
    """The checkpoints the record reached: the step each was taken at is in the steps table (a
    checkpoint comes just before its step's publish, and the record may have been cut between
    the two: such a one would skip a step the record never got)."""
    done = {(row["adapter"], row["step"]) for row in recorder.steps if row["pipeline_id"] == pipeline_id}
    reached = []
    for path in checkpoints:
        try:
            meta = read_checkpoint(path)
        except CheckpointError as error:
            raise ResumeError(str(error)) from None
        if (meta["adapter"], int(meta["version"]) - 1) in done:
            reached.append(path)
    return reached
