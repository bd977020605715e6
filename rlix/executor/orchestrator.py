"""The orchestrator: one named, long-lived async actor that hosts the policy core and its loop.

Every event reaches the core through its one `rlix.runs.Loop` (`Loop.send`), on this actor's
event loop, so the core sees one ordered sequence and `events.jsonl` is exactly that sequence.
Pipelines reach it two ways:

- program pipelines (`launch`): the orchestrator builds the pipeline's `Host` next to the loop
  and starts its pipeline actor (`rlix.executor.pipeline`), whose threads send each op here
  (`step` / `finish`); a call that must wait (a grant, a batch, pacing) awaits an asyncio
  future here, never blocking the others;
- API pipelines (`rlix.executor.api`, mixin `ExternalApi`): register, admit, request, release,
  progress, train steps, remove, as RLix's pipelines do.

Decisions go out through `RayActuator`. Each program pipeline is supervised: if its actor
raises or dies, or `kill_pipeline` is called, its actors are killed and confirmed dead, then
the core hears `PipelineRemoved(failed=True)` and hands its GPUs out in that same round. No
error of one pipeline stops the orchestrator or the others. Two background tasks: a tick
(lets backed-off retries happen) and a node monitor (a lost Ray node becomes `GpuLost` for
each of its GPUs, so its ranks are revoked and the rest go on).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time
from typing import Any

import ray
from ray.exceptions import RayTaskError

from rlix.executor.actors import ACTOR_GONE, failure_reason, kill_and_confirm
from rlix.executor.actuator import RayActuator
from rlix.executor.external import ExternalApi
from rlix.executor.pipeline import PipelineActor
from rlix.executor.placement import GpuPool, control_options
from rlix.executor.records import AsyncioFutures, PipelineRecord, RolloutBook
from rlix.executor.spans import Span, SpanBook
from rlix.executor.workload import PipelineSetup
from rlix.pipelines import ops
from rlix.policy import events as ev
from rlix.policy.config import PolicyConfig
from rlix.policy.core import Scheduler
from rlix.policy.specs import PipelineSpec, Topology
from rlix.runs.host import RETRY, VALUE, WAIT, WORK, Host, program_under
from rlix.runs.loop import Loop
from rlix.runs.recorder import Recorder

log = logging.getLogger(__name__)
ORCHESTRATOR_NAME = "rlix-orchestrator"
RemotePipelineActor = ray.remote(PipelineActor)


class Orchestrator(ExternalApi):
    def __init__(self, topology: Topology, policy: str = "rlix", config: PolicyConfig | None = None,
                 check_invariants: bool = False, record: Recorder | None = None) -> None:
        """`record`: a cut run's record (ended and reopened with a segment line, see
        Recorder.resume) that this run continues, its clock going on from the cut; the core
        starts fresh, as nothing of the cut run still holds a GPU."""
        config = config or PolicyConfig()
        self._last_now = record.end_s if record is not None else 0.0
        self.t0_wall = time.time() - self._last_now
        self.scheduler = Scheduler(topology, policy, config, check_invariants=check_invariants)
        self.recorder = record if record is not None else Recorder(topology, policy, config)
        self.rollouts = RolloutBook(self.recorder)
        self.spans = SpanBook(self.recorder)
        self.actuator = RayActuator(self)
        self.loop = Loop(self.scheduler, self.recorder, self.actuator, self.now)
        self.pipelines: dict[str, PipelineRecord] = {}
        self.pool: GpuPool | None = None
        self.lost_nodes: set[int] = set()
        self._ids = itertools.count(1)
        self._background: list[asyncio.Task[None]] = []
        #: Faults the run survived (a rollout worker replaced), for the run's summary.
        self.faults: list[dict[str, Any]] = []
        #: Each rollout worker's start: pipeline_id, dp_rank, when it was asked for and came up
        #: (t_created, t_ready on the run's clock) and the CPU seconds it took (cpu_s).
        self.worker_starts: list[dict[str, Any]] = []
        #: Each rollout worker's CPU account when its pipeline ended (RolloutWorker.cpu_account).
        self.worker_cpu: list[dict[str, float]] = []

    def now(self) -> float:
        """Seconds since the orchestrator started (wall clock, never decreasing), the clock of
        every event and every row; other actors measure against the same `t0_wall`."""
        self._last_now = max(self._last_now, time.time() - self.t0_wall)
        return self._last_now

    async def setup(self, tick_s: float = 1.0, monitor_s: float = 1.0) -> GpuPool:
        """Reserve the topology's GPUs and start the tick and the node monitor."""
        if self.pool is None:
            self.pool = await GpuPool.create(self.scheduler.topology)
            self._background = [asyncio.ensure_future(self._tick(tick_s)),
                                asyncio.ensure_future(self._monitor_nodes(monitor_s))]
        return self.pool

    def info(self) -> dict[str, Any]:
        return {"t0_wall": self.t0_wall, "pool": self.pool, "topology": self.scheduler.topology}

    # --- program pipelines ----------------------------------------------------------------

    async def launch(self, setup: PipelineSetup) -> str:
        """Register and admit a program pipeline and start its pipeline actor."""
        if self.pool is None:
            raise RuntimeError("call setup() first")
        pid = setup.pipeline_id
        if pid in self.pipelines:
            raise ValueError(f"pipeline id {pid!r} is taken")
        setup = dataclasses.replace(setup, program=program_under(setup.program, self.scheduler))
        host: Host[asyncio.Future[Any]] = Host(self.loop, setup.spec, setup.program, AsyncioFutures())
        try:
            host.start()
        except Exception:
            self.loop.hosts.pop(pid, None)
            raise
        host.thread_started()
        me = ray.get_runtime_context().current_actor
        actor = RemotePipelineActor.options(name=f"pipeline-{pid}", **control_options()).remote(
            setup, me, self.pool, self.t0_wall
        )
        record = PipelineRecord(pid, setup.spec, handler=actor, actor=actor, host=host, admitted=True)
        self.pipelines[pid] = record
        record.supervisor = asyncio.ensure_future(self._supervise(record))
        # Launched one at a time, each up before the next is asked for: pipelines arriving
        # together then start in the driver's order, as the simulator starts them (each its
        # launch_stagger_s after the one before), not in whichever order their processes
        # happened to come up (which decides who inits first on a shared home). An actor that
        # dies starting is the supervisor's to report.
        await asyncio.gather(actor.__ray_ready__.remote(), return_exceptions=True)  # type: ignore[union-attr]  # Ray types an actor handle as its class too
        return pid

    async def _supervise(self, record: PipelineRecord) -> None:
        try:
            await record.actor.run.remote()
        except RayTaskError as exc:
            cause = exc.cause if exc.cause is not None else exc
            await self._remove(record, "failed", failure_reason(cause))
            return
        except ACTOR_GONE as exc:
            await self._remove(record, "failed", f"its actor died ({type(exc).__name__})")
            return
        if record.host is not None and record.host.alive:
            await self._remove(record, "failed", "its program ended with threads still counted")
            return
        if record.status == "running":
            record.status = "finished"
        await kill_and_confirm([record.actor])

    def _host(self, pipeline_id: str) -> Host[asyncio.Future[Any]]:
        record = self.pipelines.get(pipeline_id)
        if record is None or record.host is None or not record.alive:
            raise RuntimeError(f"pipeline {pipeline_id} is not running")
        return record.host

    def placed_spec(self, pipeline_id: str) -> PipelineSpec:
        """The pipeline's spec as the core placed it (a home given as a size is mapped by the
        `Place` decision its host saw; the pipeline actor asks for it before its first stage)."""
        return self._host(pipeline_id).spec

    async def _wait(self, pipeline_id: str, future: asyncio.Future[Any]) -> Any:
        record = self.pipelines[pipeline_id]
        record.waits.add(future)
        try:
            return await future
        finally:
            record.waits.discard(future)

    async def step(self, pipeline_id: str, op: ops.Op, thread: str) -> tuple[str, Any]:
        """The host's answer to `op`: (VALUE, value) once it is ready, or (WORK, op)."""
        kind, value = self._host(pipeline_id).step(op, thread)
        if kind == WAIT:
            return VALUE, await self._wait(pipeline_id, value)
        return kind, value

    async def finish(self, pipeline_id: str, op: ops.Work, result: Any,
                     t_start: float) -> tuple[str, Any]:
        kind, value = self._host(pipeline_id).finish(op, result, t_start)
        if kind == RETRY:  # the stage's GPUs were revoked: redo it once granted again
            await self._wait(pipeline_id, value)
            return WORK, op
        return kind, value

    def fork(self, pipeline_id: str, thread: str) -> None:
        host = self._host(pipeline_id)
        host.step(ops.Fork(None), thread)  # type: ignore[arg-type]  # the program stays in the pipeline actor
        host.thread_started()

    def thread_finished(self, pipeline_id: str, thread: str) -> None:
        self._host(pipeline_id).thread_finished(thread)

    def rollout_progress(self, pipeline_id: str, remaining: dict[str, int]) -> None:
        record = self.pipelines.get(pipeline_id)
        if record is not None and record.alive and record.host is not None:
            record.host.progress(remaining)

    def ranks_progress(self, pipeline_id: str, in_flight: dict[int, int], queued: int) -> None:
        record = self.pipelines.get(pipeline_id)
        if record is not None and record.alive and record.host is not None:
            record.host.ranks_progress(in_flight, queued)

    def batch_done(self, pipeline_id: str, adapter: str, step: int, result: Any) -> None:
        self._host(pipeline_id).batch_done(adapter, step, result)

    def add_records(self, pipeline_id: str, rollouts: dict[str, list[Any]] | None, ended: list[Span],
                    still_open: list[Span] | None) -> None:
        """A pipeline actor's flush: attempts, and activity spans ended and still open (rlix.executor.spans)."""
        if rollouts:
            self.rollouts.add(rollouts)
        self.spans.add(pipeline_id, ended, still_open)

    def adopt(self, pipeline_id: str, handles: list[Any]) -> None:
        record = self.pipelines.get(pipeline_id)
        if record is None or not record.alive:
            for handle in handles:  # too late: the pipeline is going away
                ray.kill(handle)
            return
        record.adopted.extend(handles)

    # --- removal --------------------------------------------------------------------------

    async def kill_pipeline(self, pipeline_id: str, reason: str = "killed on request") -> dict[str, Any]:
        """End a pipeline now: its actors are killed and confirmed dead, then its GPUs go back.
        An API pipeline's actor is its handler (with the actors it owns, its engines): killed
        too, since its ranks' GPUs are handed out at once. `reason` is its state_reason
        (`rlix-exec kill`'s default, or the scenario's fault). The answer says whether the
        pipeline had ended before (`ended_before`: then nothing was done)."""
        record = self.pipelines.get(pipeline_id)
        if record is None:
            launched = ", ".join(sorted(self.pipelines)) or "none launched yet"
            raise KeyError(f"no pipeline {pipeline_id} in this run (its pipelines: {launched})")
        ended_before = not record.alive
        if not ended_before:
            await self._remove(record, "killed", reason)
        return {**self.describe(pipeline_id), "ended_before": ended_before}

    async def pipeline_gone(self, pipeline_id: str, reason: str) -> None:
        record = self.pipelines.get(pipeline_id)
        if record is not None and record.alive:
            await self._remove(record, "failed", reason)

    async def _remove(self, record: PipelineRecord, status: str, reason: str) -> None:
        if not record.alive:
            return
        record.removing = True
        log.warning("removing pipeline %s (%s): %s", record.pipeline_id, status, reason)
        # A program's handler is its pipeline actor; an API pipeline's is the one thing of its
        # the orchestrator can end, and its ranks' GPUs must not be handed out while it runs.
        handler = record.handler if record.handler is not record.actor else None
        if not isinstance(handler, ray.actor.ActorHandle):  # not an actor: nothing to kill
            handler = None
        handles = [h for h in (record.actor, handler, *record.adopted) if h is not None]
        left = await kill_and_confirm(handles)
        if left:
            reason += f"; {len(left)} actor(s) not confirmed dead"
        record.status, record.error = status, reason
        record.cancel_waits(status)
        now = self.now()
        self.rollouts.abort(record.pipeline_id, now)
        self.spans.cut(record.pipeline_id, now)
        if record.host is not None:
            record.host.kill()
        elif record.admitted or record.pipeline_id in self.scheduler.pipelines:
            self.loop.send(ev.PipelineRemoved(now, record.pipeline_id, True))

    # --- background -----------------------------------------------------------------------

    async def _tick(self, every_s: float) -> None:
        while True:
            await asyncio.sleep(every_s)
            if any(r.alive for r in self.pipelines.values()):
                self.loop.send(ev.Tick(self.now()))

    async def _monitor_nodes(self, every_s: float) -> None:
        while True:
            await asyncio.sleep(every_s)
            try:
                nodes = await asyncio.to_thread(ray.nodes)
            except Exception as exc:  # the GCS hiccuped: look again next time
                log.warning("node monitor: %s", exc)
                continue
            alive = {n["NodeID"] for n in nodes if n.get("Alive")}
            assert self.pool is not None
            for index, node_id in enumerate(self.pool.node_ids):
                if node_id not in alive and index not in self.lost_nodes:
                    self.lost_nodes.add(index)
                    log.warning("node %d (%s) lost: its GPUs leave the pool", index, node_id)
                    for gpu in self.pool.gpus_of_node(index):
                        self.loop.send(ev.GpuLost(self.now(), gpu))

    # --- state, for callers ---------------------------------------------------------------

    def describe(self, pipeline_id: str) -> dict[str, Any]:
        record = self.pipelines[pipeline_id]
        return {"pipeline_id": pipeline_id, "status": record.status, "error": record.error}

    def snapshot(self) -> dict[str, Any]:
        """Who holds which GPU now (from the core's state), and every pipeline's status."""
        holders: dict[int, tuple[str, str, int]] = {}
        for gpu, holder in enumerate(self.scheduler.cluster.owner):
            if holder is not None:
                cluster = getattr(holder, "cluster", "actor_infer")
                holders[gpu] = (holder.pipeline_id, cluster, getattr(holder, "dp_rank", -1))
        return {
            "now": self.now(), "num_events": self.loop.num_events, "holders": holders,
            "lost_gpus": sorted(self.scheduler.cluster.offline),
            "pipelines": {pid: self.describe(pid) for pid in self.pipelines},
            "trajectories": self.rollouts.counts(),
            "decision_durations": list(self.actuator.durations),
            "decision_failures": list(self.actuator.failures),
        }

    def num_events(self) -> int:
        """How many events the record holds (a checkpoint's record position)."""
        return int(self.loop.num_events)

    def note_fault(self, pipeline_id: str, kind: str, detail: str) -> None:
        self.faults.append({"t_s": round(self.now(), 3), "pipeline_id": pipeline_id, "kind": kind, "detail": detail})

    def note_worker_start(self, start: dict[str, Any]) -> None:
        self.worker_starts.append(dict(start))

    def note_worker_cpu(self, account: dict[str, float]) -> None:
        self.worker_cpu.append({k: float(v) for k, v in account.items()})

    def run_progress(self, cursor: list[int] | None = None) -> dict[str, Any]:
        """Per pipeline: status (and why it ended), train steps done, mean reward of its last
        step; the faults so far; with `cursor`, the record beyond it (the driver's copy)."""
        steps: dict[str, int] = {}
        reward: dict[str, float] = {}
        for row in self.recorder.steps:
            steps[row["pipeline_id"]] = steps.get(row["pipeline_id"], 0) + 1
            if "reward_mean" in row:
                reward[row["pipeline_id"]] = row["reward_mean"]
        progress = {"pipelines": {pid: self.describe(pid) for pid in self.pipelines}, "steps": steps,
                    "reward": reward, "faults": list(self.faults), "now": self.now(),
                    "worker_starts": list(self.worker_starts), "worker_cpu": list(self.worker_cpu)}
        if cursor is not None:
            progress["record"] = self.recorder.since(cursor)
        return progress

    def tables(self, pipeline_ids: list[str] | None = None) -> dict[str, list[dict[str, Any]]]:
        """The record so far as rows (closed allocations only), for tests and the CLI."""
        from rlix.runs.recorder import ALLOCATION_COLUMNS, ROLLOUT_COLUMNS

        rec = self.recorder
        wanted = set(pipeline_ids) if pipeline_ids is not None else None
        rollouts = [dict(zip(ROLLOUT_COLUMNS, row, strict=True))
                    for row in zip(*(rec.rollouts[c] for c in ROLLOUT_COLUMNS), strict=True)]
        tables = {
            "allocations": [dict(zip(ALLOCATION_COLUMNS, row, strict=True)) for row in rec.allocations],
            "rollouts": rollouts,
            "steps": [dict(row) for row in rec.steps],
        }
        if wanted is not None:
            tables = {k: [r for r in rows if r["pipeline_id"] in wanted] for k, rows in tables.items()}
        return tables

    def event_lines(self, start: int = 0) -> list[str]:
        """`events.jsonl` lines from `start` on (line 0 is the header)."""
        return self.recorder.event_lines[start:]

    async def wait_done(self, timeout_s: float | None = None) -> dict[str, Any]:
        """Wait until every launched pipeline has finished or been removed."""
        supervisors = [r.supervisor for r in self.pipelines.values() if r.supervisor is not None]
        if supervisors:  # asyncio.wait, not wait_for: a timeout must not cancel the supervisors
            _done, pending = await asyncio.wait(supervisors, timeout=timeout_s)
            if pending:
                raise TimeoutError(f"{len(pending)} pipeline(s) still running after {timeout_s} s")
        return {pid: self.describe(pid) for pid in self.pipelines}

    def finish_run(self) -> Recorder:
        """Close the record (what is still held ends now) and hand it to the caller."""
        self.recorder.finish(self.now())
        return self.recorder

    def record_so_far(self) -> tuple[Recorder, float, list[str], list[str]]:
        """The record as it stands, not closed, the time now, the pipelines driven through the
        API (no rlix program: their trajectories are their own, and rlix records none) and
        those still running, all of one moment. A caller in another process gets Ray's copy
        and closes that (`Recorder.finish(now)`), so the run's own record goes on: holdings
        still open are not cut here, and the run can be written again later."""
        api = [pid for pid, record in self.pipelines.items() if record.host is None]
        running = [pid for pid, record in self.pipelines.items() if record.status == "running"]
        return self.recorder, self.now(), api, running

    async def shutdown(self) -> None:
        for task in self._background:
            task.cancel()
        for record in list(self.pipelines.values()):
            if record.alive:
                await self._remove(record, "killed", "orchestrator shut down")
        if self.pool is not None:
            self.pool.remove()
            self.pool = None
