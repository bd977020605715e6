"""Running a checked plan live, start to run folder, and stopping it without losing the record.

`execute` starts (or joins) Ray, starts the orchestrator, launches each pipeline at its arrival,
carries out the scenario's kills, shows progress, and writes the run folder. The record lives
in the orchestrator actor; the driver keeps a copy (`Recorder.extend` of each poll's piece,
every half second), so however the run ends something complete up to that moment is written:

- it finishes: the orchestrator's own record, `summary.json` `finished: true`;
- Ctrl-C or SIGTERM: the orchestrator's record if it still answers within seconds, else the
  copy; `finished: false` and `stop_reason`, pipelines still running marked `stopped`;
- the orchestrator dies: the copy, and the reason names it.

Each pipeline's trainers save what they trained after its last step (`Workload.save_models`),
and a checkpoint every `executor.checkpoint_every` steps (`rlix.executor.checkpoints`), into a
hidden sibling of the run folder, moved in as `models/<pipeline>/` and
`checkpoints/<pipeline>/` when the folder is written (on a multi-node cluster that sibling must
be on a file system every node shares: checked before the run, `rlix.executor.cluster_checks`).

`summary.json` also gets each pipeline's final `state` (finished / failed / killed / stopped)
with its `state_reason`, and `faults`: what the run survived (rollout workers replaced).

The output folder is checked before Ray starts (`rlix.runs.paths`). If writing it still fails
at the end (a full disk), the run goes to a fallback folder named in the result, never nowhere.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rlix
from rlix.executor import cluster_checks
from rlix.executor.cluster_checks import ClusterRefused
from rlix.executor.journal import JOURNAL_FILE, JournalWriter, abort_requeued
from rlix.executor.run import ExecutorInputError, Plan, cache_dir, describe
from rlix.executor.stops import RunStopped, Stops, stop_on_signals
from rlix.runs.recorder import Recorder

#: How often the driver polls the orchestrator (progress bars, kills, its copy of the record).
POLL_S = 0.5
#: How long a stopping driver waits for the orchestrator's last word before using its copy.
LAST_WORD_S = 5.0


@dataclass
class RunResult:
    out_dir: Path | None
    status: dict[str, dict[str, Any]]
    recorder: Any
    wall_s: float
    finished: bool = True
    stop_reason: str = ""
    #: Stopped by SIGINT or SIGTERM (rather than a failure).
    by_signal: bool = False
    faults: list[dict[str, Any]] = field(default_factory=list)
    #: Set when the run folder could not be written where asked; `out_dir` is the fallback.
    write_error: str = ""
    #: How busy the machine was besides the run (rlix.executor.machine; {} off Linux).
    machine: dict[str, Any] = field(default_factory=dict)
    #: What cut the run short when it was neither a signal nor the orchestrator's death (a
    #: timeout, a bug): `execute` raises it after writing the record.
    failure: Exception | None = None
    #: Where the topology's nodes were in the Ray cluster (`node_map`): summary.json's `nodes`.
    nodes: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Cut:
    """What a resumed run continues (rlix.executor.resume): the cut run's record, finished at
    the cut and reopened after a segment line; the final states of its pipelines that are not
    started again; the faults it survived."""

    recorder: Recorder
    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    faults: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Copy:
    """The driver's copy of the orchestrator's record and of its last progress poll, appended
    to the journal on disk as it comes (rlix.executor.journal)."""

    recorder: Recorder
    progress: dict[str, Any] = field(default_factory=dict)
    journal: JournalWriter | None = None
    #: The run's stop signals, held while a piece is taken: one taken into the copy but cut
    #: out of the journal (or cut mid-line) would leave a hole no later poll fills.
    stops: Stops | None = None

    def take(self, progress: dict[str, Any]) -> dict[str, Any]:
        piece = progress.pop("record")
        with self.stops.held() if self.stops is not None else nullcontext():
            self.recorder.extend(piece)
            self.progress = progress
            if self.journal is not None:
                self.journal.write(piece, progress)
        return progress


def execute(the_plan: Plan, out_dir: str | Path | None = None, address: str | None = None,
            quiet: bool = False, check_invariants: bool = False, timeout_s: float | None = None,
            overwrite: bool = False, cut: Cut | None = None) -> RunResult:
    """Run a checked plan on Ray and write its run folder (when `out_dir` is given); with
    `cut`, continue that cut run (its folder's live sibling prepared by the caller)."""
    from rlix.executor import session
    from rlix.runs.paths import check_out_dir

    live = None
    if out_dir is not None:
        if cut is None:
            check_out_dir(out_dir, overwrite)  # before the run, which can take hours
        live = _live_folder(Path(out_dir), fresh=cut is None, overwrite=overwrite)
        the_plan = _with_folders(the_plan, live)
    topology = the_plan.topology
    if address is None and topology.num_nodes > 1:
        raise ExecutorInputError(f"topology has {topology.num_nodes} nodes: start a Ray cluster of them "
                                 "and pass its --address (a local run is one node)")
    scenario = the_plan.scenario
    ex = scenario.executor
    if not quiet:  # after the checks above, so a bad input stays one error line
        print(("resuming " if cut is not None else "") + describe(the_plan, out_dir), file=sys.stderr, flush=True)
    import ray

    started = not ray.is_initialized()
    session.start(num_gpus=topology.num_gpus, num_cpus=ex.num_cpus if ex is not None else None, address=address)
    made = cluster_checks.made_for(live) if live is not None else []
    if address is not None:  # a joined cluster too small for the topology: one line, nothing written
        cluster_checks.check_cluster(topology, address, started)
        if live is not None:  # trainers on other nodes write models and checkpoints into `live`
            cluster_checks.check_shared(live, topology, address, started, made if cut is None else [])
        if started:  # this process's run: `rlix-exec kill` on this machine finds it (gone at its end)
            session.record_joined_run()
    # The stop signals are the run's from the moment Ray is up (ray.init installs Ray's own
    # SIGTERM handler, which aborts the driver with a stack dump and no record); one that comes
    # before the run begins is held until it does, and then stops it at once.
    with stop_on_signals() as begin:
        t0 = time.monotonic()
        copy = _Copy(cut.recorder if cut is not None else Recorder(topology, scenario.policy.name,
                                                                   scenario.policy_config()), stops=begin)
        if live is not None:
            owner = {"driver_pid": os.getpid(), "host": socket.gethostname(),
                     "raylet_pids": session.raylet_pids() if address is None else []}
            copy.journal = JournalWriter(live / JOURNAL_FILE, scenario.to_yaml(), rlix.__version__, owner)
        try:
            result = _run(the_plan, copy, cut, quiet, check_invariants, timeout_s, started, begin)
        except ClusterRefused:
            # Nothing ran: a fresh run leaves nothing behind (a resume's live folder stays, to resume).
            if copy.journal is not None:
                copy.journal.close()
            if cut is None:
                cluster_checks.remove_made(made)
            raise
        finally:
            if copy.journal is not None:
                copy.journal.close()
        result.wall_s = time.monotonic() - t0
        if out_dir is not None:
            _write(result, Path(out_dir), the_plan, overwrite or cut is not None, live)
    if result.failure is not None:  # the record is written; what cut the run short is not hidden
        if result.out_dir is not None:
            result.failure.add_note(f"the record so far is in {result.out_dir}")
        raise result.failure
    return result


def _run(the_plan: Plan, copy: _Copy, cut: Cut | None, quiet: bool, check_invariants: bool,
         timeout_s: float | None, started: bool, stops: Stops) -> RunResult:
    """The run itself, from the orchestrator's start to a record (finished or cut short);
    `stops` raises the stop signals as RunStopped while it is on."""

    from ray.exceptions import RayTaskError

    from rlix.executor.actors import ACTOR_GONE, failure_reason
    from rlix.executor.api import OrchestratorExists, launch_orchestrator
    from rlix.executor.placement import PlacementError

    scenario = the_plan.scenario
    from rlix.executor.machine import MachineMeter

    stop_reason, status, recorder, by_signal = "", {}, None, False
    nodes: list[dict[str, Any]] = []
    failure: Exception | None = None
    meter = MachineMeter()
    handle = None
    try:
        stops.on()
        try:
            handle, ready = launch_orchestrator(the_plan.topology, scenario.policy.name, scenario.policy_config(),
                                                check_invariants=check_invariants,
                                                record=cut.recorder if cut is not None else None)
        except OrchestratorExists as exc:  # a run that began since the check
            raise ClusterRefused(str(exc)) from None
        stops.check()  # a stop Ray's C++ core swallowed while it waited (rlix.executor.stops)
        try:
            nodes = node_map(_get(ready))  # the orchestrator's set-up (its GpuPool): seconds on a busy machine
        except RayTaskError as exc:  # its GPUs could not be reserved (held by other jobs)
            if isinstance(exc.cause, PlacementError):
                raise ClusterRefused(str(exc.cause)) from None
            raise
        stops.check()
        _drive(handle, the_plan, quiet, timeout_s, copy, cut.recorder.end_s if cut is not None else 0.0, meter,
               stops)
        status = _get(handle.wait_done.remote(None))
        recorder = _get(handle.finish_run.remote())
    except ClusterRefused:
        raise  # before anything ran: no record to write
    except KeyboardInterrupt:
        stop_reason, by_signal = "interrupted (SIGINT)", True
    except RunStopped as exc:
        stop_reason, by_signal = str(exc), True
    except ACTOR_GONE as exc:
        stop_reason = f"the orchestrator actor died ({type(exc).__name__})"
    except Exception as exc:  # noqa: BLE001 - re-raised by `execute` once the record is written
        stop_reason, failure = f"the driver failed ({failure_reason(exc)})", exc
    finally:
        stops.off()  # a second signal does not cut the shut-down and the record short
        if handle is not None and (stop_reason or recorder is None):
            _last_word(handle, copy)
        _shut_down(handle, started, the_plan.topology.num_nodes)
    if recorder is None:
        recorder, status = _stopped_record(copy, stop_reason or "the run ended early")
    faults = (cut.faults if cut is not None else []) + copy.progress.get("faults", [])
    status = {**(cut.states if cut is not None else {}), **status}
    machine = meter.result()
    if machine:  # what the rollout workers' CPU went to (rlix.sim.cpu_work)
        starts, accounts = copy.progress.get("worker_starts"), copy.progress.get("worker_cpu")
        if starts:
            machine["worker_starts"] = list(starts)
            machine["worker_start_cpu_s"] = [start["cpu_s"] for start in starts]
        if accounts:
            machine["worker_cpu"] = list(accounts)
    return RunResult(None, status, recorder, 0.0, not stop_reason, stop_reason, by_signal, faults,
                     machine=machine, failure=failure, nodes=nodes)


def live_folder(out_dir: Path) -> Path:
    """Where the run writes as it goes (`journal.jsonl`, `models/`, `checkpoints/`), moved into
    the run folder when it is written: a hidden sibling of it."""
    return out_dir.parent / f".{out_dir.name}.live"


def _live_folder(out_dir: Path, fresh: bool, overwrite: bool = False) -> Path:
    """The live folder of a run about to start (`fresh`) or resume. A fresh run's takes the
    place of an earlier attempt's; one with a journal is a cut run's, to resume: replaced only
    with `overwrite`."""
    live = live_folder(out_dir)
    if fresh and live.exists():
        if (live / JOURNAL_FILE).exists() and not overwrite:
            raise ExecutorInputError(f"{live}: holds a cut run of {out_dir}; continue it with "
                                     f"`rlix-exec resume {out_dir}`, or --overwrite to start again")
        shutil.rmtree(live, ignore_errors=True)
    return live


def _with_folders(the_plan: Plan, live: Path) -> Plan:
    ex = the_plan.scenario.executor
    keep = ex.keep_checkpoints if ex is not None else 2
    setups = [dataclasses.replace(s, models_dir=str(live / "models" / s.pipeline_id),
                                  checkpoints_dir=str(live / "checkpoints" / s.pipeline_id), keep_checkpoints=keep)
              for s in the_plan.setups]
    return dataclasses.replace(the_plan, setups=setups)


def _drive(handle: Any, the_plan: Plan, quiet: bool, timeout_s: float | None, copy: _Copy,
           clock_start: float, meter: Any, stops: Stops) -> None:
    """Launch pipelines at their arrival times, carry out kills, show progress until done (a
    resumed run's clock starts at the cut: what was due before is due at once, earlier kills
    were carried out). A stop that Ray's code swallowed is raised again at the next poll."""
    from rlix.executor.progress import Progress

    start = time.monotonic() - clock_start
    to_launch = sorted(the_plan.setups, key=lambda s: the_plan.arrivals[s.pipeline_id])
    kills = [kill for kill in the_plan.kills if kill[0] >= clock_start]
    progress = Progress(the_plan.setups, quiet)
    try:
        while True:
            elapsed = time.monotonic() - start
            while to_launch and the_plan.arrivals[to_launch[0].pipeline_id] <= elapsed:
                _get(handle.launch.remote(to_launch.pop(0)))
            while kills and kills[0][0] <= elapsed:
                at_s, pipeline_id = kills.pop(0)
                _get(handle.kill_pipeline.remote(pipeline_id, f"killed by the scenario's faults at {at_s:g} s"))
            snapshot = copy.take(_get(handle.run_progress.remote(list(copy.recorder.cursor()))))
            progress.update(snapshot)
            if meter is not None:
                meter.sample()
            if not to_launch and all(p["status"] != "running" for p in snapshot["pipelines"].values()):
                return
            if timeout_s is not None and elapsed > timeout_s:
                raise TimeoutError(f"the run did not finish within {timeout_s} s")
            stops.check()
            time.sleep(POLL_S)
    finally:
        progress.close()


def _get(ref: Any) -> Any:
    """`ray.get`, with a stop signal that came while it waited raised as the RunStopped it is
    (Ray's C code wraps what a signal handler raises in a SystemError). A launch waits for its
    pipeline actor to start, seconds in which a Ctrl-C is likely to land."""
    import ray

    try:
        return ray.get(ref)
    except SystemError as error:
        if isinstance(error.__cause__, RunStopped):
            raise error.__cause__ from None
        raise


def _last_word(handle: Any, copy: _Copy) -> None:
    """The record's last piece, if the orchestrator still answers within seconds."""
    import ray

    try:
        copy.take(ray.get(handle.run_progress.remote(list(copy.recorder.cursor())), timeout=LAST_WORD_S))
    except Exception:  # noqa: BLE001 - gone, hung or interrupted: the copy is what there is
        pass


def _shut_down(handle: Any, started: bool, num_nodes: int) -> None:
    import ray

    from rlix.executor import session
    from rlix.executor.placement import remove_left_groups

    if handle is not None:  # None: stopped before the orchestrator was launched
        try:
            ray.get(handle.shutdown.remote(), timeout=30)
            shut = True
        except Exception:  # noqa: BLE001 - a dead orchestrator has nothing left to shut down
            shut = False
        try:  # one that did not shut down in time still goes (in a Ray cluster it would outlive us)
            ray.kill(handle)
        except Exception:  # noqa: BLE001 - already gone
            pass
        if not shut and not started:  # our own Ray session goes with what it holds
            remove_left_groups(num_nodes)
    if started:
        session.stop()


def _stopped_record(copy: _Copy, reason: str) -> tuple[Recorder, dict[str, dict[str, Any]]]:
    """The copy, closed at the last time the orchestrator told; pipelines still running are
    `stopped`."""
    recorder = copy.recorder
    # Without a poll yet, the clock stands where the record does (a resumed run's cut).
    now = float(copy.progress.get("now", recorder.end_s))
    recorder.finish(now)
    status = {}
    for pid, described in copy.progress.get("pipelines", {}).items():
        if described["status"] == "running":
            described = {**described, "status": "stopped", "error": reason}
        status[pid] = described
    # A trajectory re-queued just before the stop has no later attempt: it ends as aborted at
    # the cut, as a resume ends it, not as "re-queued and never finished" (invariant 8).
    abort_requeued(recorder, {pid for pid, s in status.items() if s["status"] == "stopped"}, now)
    return recorder, status


def _write(result: RunResult, out_dir: Path, the_plan: Plan, overwrite: bool, live: Path | None = None) -> None:
    """The run folder where asked; if that fails now, in a fallback folder (named in the result).
    A stop signal waits for it (a run folder cut short would be lost); the journal stays beside
    it until it is written, so a run killed while writing can still be resumed."""
    from rlix.runs.errors import RunError
    from rlix.runs.folder import write_run

    state = {
        "finished": result.finished, "stop_reason": result.stop_reason or None, "faults": result.faults,
        "states": {pid: (s["status"], s.get("error") or None) for pid, s in result.status.items()},
    }
    yaml = the_plan.scenario.to_yaml()
    folders = {p.name: p for p in live.iterdir()} if live is not None and live.is_dir() else {}
    if result.finished:  # a finished run needs no journal to resume from
        folders.pop(JOURNAL_FILE, None)
    with stop_on_signals():
        try:
            result.out_dir = write_run(result.recorder, out_dir, scenario_yaml=yaml, overwrite=overwrite,
                                       run_state=state, folders=folders, extra_summary=_machine(result))
        except (OSError, RunError) as error:
            fallback = cache_dir() / "unsaved" / f"{out_dir.name}-{time.strftime('%Y%m%d-%H%M%S')}"
            result.write_error = f"{out_dir}: {error}"
            result.out_dir = write_run(result.recorder, fallback, scenario_yaml=yaml, run_state=state,
                                       folders=folders, extra_summary=_machine(result))
        if live is not None:
            shutil.rmtree(live, ignore_errors=True)  # emptied by the moves, but for a finished run's journal


def _machine(result: RunResult) -> dict[str, Any]:
    """`machine` in summary.json: how busy the machine was besides the run (calibration reads it);
    `nodes`: which Ray node each node of the topology was."""
    extra: dict[str, Any] = {"machine": result.machine} if result.machine else {}
    if result.nodes:
        extra["nodes"] = result.nodes
    return extra


def node_map(pool: Any) -> list[dict[str, Any]]:
    """Each node of the topology as the run's GpuPool placed it: its core GPU ids, the Ray node
    (id and address) and the physical GPU ids its bundles got, so the allocations and rollouts
    tables' GPUs can be told apart by machine after the run."""
    import ray

    addresses = {str(n["NodeID"]): str(n.get("NodeManagerAddress", ""))
                 for n in ray.nodes()}  # type: ignore[no-untyped-call]  # Ray's ray.nodes() is untyped
    return [{"node": index, "gpus": list(pool.gpus_of_node(index)), "ray_node_id": node_id,
             "address": addresses.get(node_id, ""), "physical_gpus": list(pool.physical[index])}
            for index, node_id in enumerate(pool.node_ids)]
