"""The pipeline actor: runs one pipeline's shared program (`rlix.pipelines`) with real work.

Each thread of the program runs here as an asyncio task with the runner loop of
`rlix.runs.host`: every op goes to the orchestrator (`step`), which turns it into core events
through the pipeline's `Host` and answers with the op's value once it is ready (a grant applied,
a batch complete, rollout allowed) or with WORK; the work is done here and reported back
(`finish`). Forks start a local task. The work:

- a stage runs on the cluster's trainer actor (created when the cluster is first granted, for
  its init stage), through the pipeline's workload; the init of the trainer that publishes
  weights then starts every rollout rank's worker, asleep, so the init ends with them up;
- a rollout batch goes into the pipeline's queue, which the active rollout ranks drain
  (`rlix.executor.ranks`); when a batch is complete the orchestrator's host hears of it;
- a publish puts the trainer's new weights in the object store (the host copy) and brings the
  idle active ranks up to date; busy ones catch up before their next call; inactive ranks load
  the newest weights when they expand.

The orchestrator's actuator calls `expand`, `shrink` and `revoke` here. When the last thread
ends, the pipeline ends its workers and trainers (confirmed dead) *before* it tells the
orchestrator, so the core frees its GPUs only once nothing runs on them. An exception in any
thread or rank loop makes `run` raise; the orchestrator then removes the pipeline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

from rlix.executor.actors import RemoteTrainerWorker, kill_and_confirm
from rlix.executor.placement import GpuPool
from rlix.executor.ranks import Ranks
from rlix.executor.spans import ActorSpans
from rlix.executor.trajectories import Attempt, RolloutQueue, attempt_columns
from rlix.executor.workload import PipelineSetup
from rlix.pipelines import ops, program_for
from rlix.pipelines.ops import Program
from rlix.runs.host import WORK

log = logging.getLogger(__name__)
FLUSH_EVERY_S = 0.5


class PipelineActor:
    def __init__(self, setup: PipelineSetup, orchestrator: Any, pool: GpuPool, t0_wall: float) -> None:
        self.setup = setup
        self.pipeline_id = setup.pipeline_id
        self.orch = orchestrator
        self.pool = pool
        self.t0_wall = t0_wall
        self.workload = setup.workload(setup)
        self.queue = RolloutQueue()
        self.ranks = Ranks(self)
        self.trainers: dict[str, Any] = {}
        self._num_threads = 0
        self._thread_seq = 0
        self._next_id: dict[str, int] = {}
        self._rows: list[Attempt] = []
        self.spans = ActorSpans(self.pipeline_id, self.now)
        self._sent_remaining: dict[str, int] = {}
        self._failure: asyncio.Future[None] | None = None
        self._done: asyncio.Future[None] | None = None
        self._published: dict[str, int] = {}
        self._num_checkpoints = 0
        if setup.resume is not None:  # ids and checkpoint numbers go on from the cut run's
            self._next_id.update(setup.resume.first_ids)
            self._num_checkpoints = setup.resume.next_checkpoint - 1

    def now(self) -> float:
        return time.time() - self.t0_wall

    # --- life cycle -----------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        """Run the program to its end (the orchestrator has registered the pipeline and counted
        its main thread); raises the first exception of any thread."""
        loop = asyncio.get_running_loop()
        self._failure, self._done = loop.create_future(), loop.create_future()
        flusher = asyncio.ensure_future(self._flush_loop())
        self._num_threads = 1
        self._spawn(program_for(self.setup.program), "main")
        try:
            await asyncio.wait([self._failure, self._done], return_when=asyncio.FIRST_COMPLETED)
        finally:
            flusher.cancel()
            await self.flush()
        if self._failure.done():
            self._failure.result()  # raises
        return {"restarts": self.ranks.num_restarts}

    def fail(self, exc: BaseException) -> None:
        if self._failure is not None and not self._failure.done():
            log.error("pipeline %s failed: %r", self.pipeline_id, exc)
            self._failure.set_exception(exc)

    def _spawn(self, program: Program, thread: str) -> None:
        task = asyncio.ensure_future(self._thread(program, thread))
        task.add_done_callback(lambda t: None if t.cancelled() or t.exception() is None else self.fail(t.exception()))  # type: ignore[arg-type]

    async def _thread(self, program: Program, thread: str) -> None:
        value: Any = None
        while True:
            try:
                op = program.send(value)
            except StopIteration:
                break
            value = await self._op(op, thread)
        self._num_threads -= 1
        # Only the last thread ends the pipeline, once the orchestrator has heard of its end:
        # another thread's report can return while the last one is still tearing down, and
        # the pipeline must not end with a thread still counted on the orchestrator's side.
        last = self._num_threads == 0
        if last:
            await self._teardown()
            await self.flush()
        await self.orch.thread_finished.remote(self.pipeline_id, thread)
        if last and self._done is not None and not self._done.done():
            self._done.set_result(None)

    async def _op(self, op: ops.Op, thread: str) -> Any:
        if isinstance(op, ops.Fork):
            self._thread_seq += 1
            child = f"t{self._thread_seq}"
            await self.orch.fork.remote(self.pipeline_id, thread)
            self._num_threads += 1
            self._spawn(op.program, child)
            return None
        kind, value = await self.orch.step.remote(self.pipeline_id, op, thread)
        while kind == WORK:
            t_start = self.now()
            result = await self._work(value)
            kind, value = await self.orch.finish.remote(self.pipeline_id, value, result, t_start)
        return value

    async def _teardown(self) -> None:
        await self.ranks.stop_all()
        models_dir, resume = self.setup.models_dir, self.setup.resume
        if models_dir is not None and self.trainers:
            await self.workload.save_models(self.trainers, models_dir)
        elif models_dir is not None and self.setup.program.finished and resume and resume.checkpoint:
            await self.workload.models_from_checkpoint(resume.checkpoint, models_dir)
        left = await kill_and_confirm(list(self.trainers.values()))
        if left:
            log.warning("pipeline %s: %d trainer(s) not confirmed dead", self.pipeline_id, len(left))
        self.trainers.clear()

    # --- work -----------------------------------------------------------------------------

    async def _work(self, op: ops.Work) -> Any:
        if isinstance(op, ops.Stage):
            return await self._stage(op)
        if isinstance(op, ops.Checkpoint):
            return await self._checkpoint(op)
        if isinstance(op, ops.Prefetch):
            await self._start_trainer(op.cluster, on_host=True)
            return None
        if isinstance(op, ops.Generate):
            first = self._next_id.get(op.adapter, 0)
            batch = self.workload.make_batch(op.adapter, op.step, op.num_prompts, op.samples_per_prompt, first)
            self._next_id[op.adapter] = first + len(batch)
            self.queue.submit(batch)
            self._sent_remaining = self.queue.remaining()
            return self._sent_remaining
        trainer = self.trainers[self.workload.weights_cluster]
        ref = await trainer.export.remote(op.adapter)
        self._published[op.adapter] = op.version
        self.ranks.published(op.adapter, op.version, ref)
        await self.ranks.sync_idle()
        return None

    async def _gpus(self, cluster: str) -> tuple[int, ...]:
        if not self.setup.spec.placed:  # a sized home: the core has placed it by its first grant
            self.setup = dataclasses.replace(self.setup, spec=await self.orch.placed_spec.remote(self.pipeline_id))
        return tuple(self.setup.spec.clusters[cluster].mapping)

    async def _start_trainer(self, cluster: str, on_host: bool) -> Any:
        """Start `cluster`'s trainer on its home's node and load its model (the resumed
        checkpoint's, if any): `on_host`, into host memory only (a Prefetch, holding no GPU);
        else onto its GPUs and off again (an init that did not prefetch)."""
        gpus = await self._gpus(cluster)
        trainer = RemoteTrainerWorker.options(**self.pool.actor_options(gpus)).remote(
            self.pipeline_id, cluster, self.pool.visible_devices(gpus),
            self.workload.trainer_factory(cluster, on_host),
        )
        self.trainers[cluster] = trainer
        await self.adopt(trainer)
        # its model loaded: an actor's start is asynchronous
        await trainer.__ray_ready__.remote()  # type: ignore[union-attr]  # Ray types an actor handle as its class too
        resume = self.setup.resume
        if resume is not None and resume.checkpoint is not None:
            await self.workload.restore(cluster, trainer, resume.checkpoint)
        return trainer

    async def _stage(self, op: ops.Stage) -> Any:
        trainer = self.trainers.get(op.cluster)
        gpus = await self._gpus(op.cluster)
        # From here: a cluster's first stage (its init) starts its trainer unless a Prefetch
        # did, which is the init's work (the model load), so its busy span covers it as the
        # simulator's init does; after a Prefetch the init moves the model onto the GPUs.
        with self.spans.span(op.cluster, -1, gpus, "busy", op.stage):
            if trainer is None:
                trainer = await self._start_trainer(op.cluster, on_host=False)
            batch = self.queue.batch(op.adapter, op.step) if op.step >= 0 else None
            result = await self.workload.run_stage(op, self.trainers, batch)
            if op.stage == "init" and op.cluster == self.workload.weights_cluster:
                for name in self.workload.weight_names():  # a resumed adapter's weights are a later version
                    version = self.setup.program.first_step(name)
                    self._published[name] = version
                    self.ranks.published(name, version, await trainer.export.remote(name))
        if op.stage == "init" and op.cluster == self.workload.weights_cluster and self.setup.prestart_workers:
            # As RLix initializes: the pipeline's init ends with its rollout ranks' workers up
            # and asleep, so no expansion later waits for a worker process to start (seconds of
            # a held, idle GPU in mid-run that no schedule could foresee). They start after the
            # trainer, one at a time: on a few cores, starts at once only slow each other, and
            # in sequence the init is the trainer's busy span above plus a start per rank.
            await self.ranks.prestart()
        return result

    async def attempts_done(self, attempts: list[Attempt]) -> None:
        """A rank's call came back: record it, re-queue what is unfinished, close batches."""
        self.record(attempts)
        unfinished = [a.trajectory for a in attempts if not a.trajectory.done]
        self.queue.put_back(unfinished)
        complete = self.queue.complete([a.trajectory for a in attempts if a.trajectory.done])
        self.report_progress()
        for adapter, step in complete:
            result = self.workload.batch_result(self.queue.batch(adapter, step))
            await self.orch.batch_done.remote(self.pipeline_id, adapter, step, result)

    def report_progress(self) -> None:
        """Tell the core how much rollout work is left, when it moved by `progress_every` of a
        batch since the last report (or an adapter ran out): the split is re-planned on each."""
        remaining = self.queue.remaining()
        step = max(1.0, self.setup.progress_every * self.setup.program.batch_size)
        moved = any(abs(n - self._sent_remaining.get(a, 0)) >= step or (n == 0 and self._sent_remaining.get(a))
                    for a, n in remaining.items())
        if moved:
            self._sent_remaining = remaining
            self.orch.rollout_progress.remote(self.pipeline_id, remaining)
        if sum(remaining.values()):
            # Where the work is (the host sends it on only when the tail state changes). What a
            # rank being shrunk still runs is as good as queued: it comes back to the queue.
            in_flight = {r: len(rank.in_flight) for r, rank in self.ranks.active.items()}
            queued = self.queue.num_waiting + self.ranks.num_returning()
            self.orch.ranks_progress.remote(self.pipeline_id, in_flight, queued)

    async def _checkpoint(self, op: ops.Checkpoint) -> None:
        """Save before publishing version `op.version` of `op.adapter` (rlix.executor.checkpoints)."""
        if self.setup.checkpoints_dir is None:
            return
        from pathlib import Path

        from rlix.executor.checkpoints import checkpoint_name, write_checkpoint

        self._num_checkpoints += 1
        save = getattr(self.workload, "save_checkpoint", None)
        versions: dict[str, int] = {}

        async def fill(folder: Path) -> None:
            if save is not None:
                versions.update(await save(self.trainers, str(folder)))

        next_step = {a.name: self._published.get(a.name, 0) for a in self.setup.program.adapters}
        next_step[op.adapter] = op.version
        # `versions` is filled by the save, before the metadata is written (last).
        meta = {"pipeline_id": self.pipeline_id, "adapter": op.adapter, "version": op.version,
                "versions": versions, "next_step": next_step, "sequence": self._num_checkpoints,
                "t_s": round(self.now(), 3), "num_events": await self.orch.num_events.remote()}
        name = checkpoint_name(self._num_checkpoints, op.adapter, op.version)
        await write_checkpoint(Path(self.setup.checkpoints_dir), name, fill, meta, self.setup.keep_checkpoints)

    # --- decisions (called by the orchestrator's actuator) --------------------------------

    async def expand(self, dp_rank: int, gpus: tuple[int, ...]) -> None:
        await self.ranks.expand(dp_rank, tuple(gpus))

    async def shrink(self, dp_rank: int, gpus: tuple[int, ...], reason: str, drain_s: float = 0.0) -> None:
        await self.ranks.shrink(dp_rank, drain_s)

    async def revoke(self, cluster: str, dp_rank: int, gpus: tuple[int, ...]) -> None:
        if dp_rank >= 0:
            await self.ranks.revoke(dp_rank)
        # A revoked stage is redone by the host (RETRY) once its cluster is granted again.

    # --- the record -----------------------------------------------------------------------

    async def adopt(self, handle: Any) -> None:
        """Tell the orchestrator about an actor of ours, so a kill can end it for sure."""
        await self.orch.adopt.remote(self.pipeline_id, [handle])

    def fault(self, kind: str, detail: str) -> None:
        """A fault this pipeline survived (a rollout worker died and was replaced): for the run's
        summary, which lists what a run went through."""
        self.orch.note_fault.remote(self.pipeline_id, kind, detail)

    def worker_cpu(self, account: dict[str, float]) -> None:
        """A rollout worker's CPU account when the pipeline ends (`machine.worker_cpu`)."""
        self.orch.note_worker_cpu.remote(account)

    def worker_started(self, dp_rank: int, cpu_s: float, t_created: float, t_ready: float) -> None:
        """Rank `dp_rank`'s worker is up: asked for at `t_created`, ready at `t_ready` (the run's
        clock), its start having taken `cpu_s` CPU seconds. For the run's summary
        (`machine.worker_start_cpu_s`, `machine.worker_starts`), which calibration reads."""
        self.orch.note_worker_start.remote({"pipeline_id": self.pipeline_id, "dp_rank": dp_rank,
                                            "t_created": t_created, "t_ready": t_ready, "cpu_s": float(cpu_s)})

    def record(self, attempts: list[Attempt]) -> None:
        self._rows.extend(attempts)

    async def flush(self) -> None:
        rows, self._rows = self._rows, []
        ended, still_open = self.spans.take()
        if rows or ended or still_open is not None:
            await self.orch.add_records.remote(self.pipeline_id, attempt_columns(rows) if rows else None, ended,
                                               still_open)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_EVERY_S)
            await self.flush()

    # --- for tests and the CLI ------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {"ranks": self.ranks.snapshot(), "waiting": self.queue.num_waiting,
                "remaining": self.queue.remaining(), "trainers": dict(self.trainers)}
