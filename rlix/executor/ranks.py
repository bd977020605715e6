"""A pipeline's rollout ranks: expand, shrink, revoke, the per-rank feeding loop, weight sync.

Lives in the pipeline actor. Each rank has one worker actor (created at its first expansion,
on its bundle, and kept: it sleeps when shrunk and wakes when expanded again). While a rank is
active its loop takes trajectories from the pipeline's queue (one adapter per call), brings
the worker's weights up to date first if a newer version was published, and generates.

No trajectory is lost: a shrink stops the worker, which hands back what it has (unfinished
trajectories keep their generated prefix and go back to the front of the queue; a shrink that
drains first lets the call it runs finish, for its `drain_s` at most); a worker that
dies mid-call has the trajectories it held re-queued as they were when handed out, and is
replaced on the same bundle; a revoked rank (its GPU was lost) re-queues the same way.

A pipeline's end (`stop_all`) and an expansion the core decided before it heard of that end
can meet in this actor: the end waits for an expansion under way, and one that comes after it
began does nothing (the pipeline's GPUs are freed with its end). Otherwise the expansion could
wake a worker the end had just killed, and report a fault the run never had.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlix.executor.actors import ACTOR_GONE, RemoteRolloutWorker, kill_and_confirm
from rlix.executor.trajectories import Attempt, Trajectory
from rlix.policy.specs import ROLLOUT_CLUSTER

if TYPE_CHECKING:
    from rlix.executor.pipeline import PipelineActor

log = logging.getLogger(__name__)
WAKE_TIMEOUT_S = 120.0
START_TIMEOUT_S = 300.0
#: How long the workers' CPU accounts are waited for when a pipeline ends (a summary figure,
#: not worth holding the end of a run for).
ACCOUNT_TIMEOUT_S = 10.0
#: How long a pipeline's end waits for an expansion under way (a wake, or a new worker's
#: start) before it ends the workers anyway.
END_WAITS_FOR_EXPANSION_S = 30.0


@dataclass
class Rank:
    dp_rank: int
    gpus: tuple[int, ...]
    worker: Any
    active: bool = True
    versions: dict[str, int] = field(default_factory=dict)
    in_flight: list[Trajectory] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    task: asyncio.Task[None] | None = None


class Ranks:
    def __init__(self, pipeline: PipelineActor) -> None:
        self.p = pipeline
        self.active: dict[int, Rank] = {}
        #: Ranks being shrunk: out of `active`, their loop still running until the worker
        #: hands back what it holds (which then goes back to the queue).
        self.leaving: dict[int, Rank] = {}
        self.workers: dict[int, Any] = {}
        #: adapter -> (version, [ObjectRef]) of the newest published weights.
        self.weights: dict[str, tuple[int, list[Any]]] = {}
        self.num_restarts = 0
        #: Set when the pipeline's end begins: no worker is woken or started after it.
        self.closing = False
        #: Set when the end kills the workers: a call that fails after it found no death.
        self.workers_killed = False
        self._num_expanding = 0
        self._no_expansion = asyncio.Event()
        self._no_expansion.set()

    # --- decisions ------------------------------------------------------------------------

    async def expand(self, dp_rank: int, gpus: tuple[int, ...]) -> None:
        if self.closing:
            return
        if dp_rank in self.active:
            raise RuntimeError(f"rank {dp_rank} is already active")
        self._num_expanding += 1
        self._no_expansion.clear()
        try:
            await self._expand(dp_rank, gpus)
        finally:
            self._num_expanding -= 1
            if self._num_expanding == 0:
                self._no_expansion.set()

    async def _expand(self, dp_rank: int, gpus: tuple[int, ...]) -> None:
        worker = self.workers.get(dp_rank) or await self._new_worker(dp_rank, gpus)
        rank = Rank(dp_rank, gpus, worker)
        try:
            await self._wake(rank)
        except ACTOR_GONE:  # the sleeping worker died meanwhile: replace it once
            if self.closing:  # the end stopped waiting for this expansion: no worker replaced
                return
            self.workers.pop(dp_rank, None)
            self.num_restarts += 1
            self._worker_died(f"rank {dp_rank}: its sleeping worker died; replaced")
            rank.worker = await self._new_worker(dp_rank, gpus)
            await self._wake(rank)
        self.active[dp_rank] = rank
        rank.task = asyncio.ensure_future(self._loop(rank))
        rank.task.add_done_callback(on_error(self.p.fail))

    async def shrink(self, dp_rank: int, drain_s: float = 0.0) -> None:
        """Stop the rank and put it to sleep. With `drain_s`, the call it runs may finish first
        (for that long at most): its loop takes nothing new once the rank is inactive."""
        rank = self.active.pop(dp_rank, None)
        if rank is None:
            return
        rank.active = False
        self.leaving[dp_rank] = rank
        self.p.queue.changed.set()  # an idle loop waits for work: let it see it must end
        if drain_s > 0 and rank.task is not None and rank.in_flight:
            await asyncio.wait({rank.task}, timeout=drain_s)  # a timeout leaves the loop running
        try:
            await rank.worker.stop.remote()
        except ACTOR_GONE:
            pass
        try:
            if rank.task is not None:
                await rank.task  # the loop re-queues what the worker hands back
        finally:
            self.leaving.pop(dp_rank, None)
        # Under the rank's lock: a publish's weight sync that reached the rank before the
        # shrink did ends first (it would otherwise update an engine that is asleep).
        async with rank.lock:
            with self.p.spans.span(ROLLOUT_CLUSTER, dp_rank, rank.gpus, "loading", "offload"):
                try:
                    await rank.worker.sleep.remote()
                except ACTOR_GONE:
                    # Dead since its last call (its loop was waiting for work, so nothing was
                    # lost); had the loop seen the death, it would have reported it and let go.
                    if self._let_go(dp_rank):
                        self._worker_died(f"rank {dp_rank}: its worker was found dead when the rank was shrunk "
                                          "(it held no trajectories); the rank's next expansion starts a new one")

    async def revoke(self, dp_rank: int) -> None:
        """The rank's GPU was lost: re-queue what it held and end its worker."""
        rank = self.active.pop(dp_rank, None)
        if rank is None:
            return
        rank.active = False
        if rank.task is not None:
            rank.task.cancel()
            await asyncio.gather(rank.task, return_exceptions=True)
        worker = self.workers.pop(dp_rank, None)
        if worker is not None:
            await kill_and_confirm([worker], timeout_s=5.0)

    async def stop_all(self) -> None:
        self.closing = True
        try:
            await asyncio.wait_for(self._no_expansion.wait(), END_WAITS_FOR_EXPANSION_S)
        except TimeoutError:
            log.warning("%s: an expansion still under way at the pipeline's end", self.p.pipeline_id)
        await self._account_cpu()
        self.workers_killed = True
        for dp_rank in list(self.active):
            await self.revoke(dp_rank)
        await kill_and_confirm(list(self.workers.values()))
        self.workers.clear()

    async def _account_cpu(self) -> None:
        """Each live worker's CPU account, for the run's summary (a worker that does not answer
        in time, or died, is left out). A worker found dead here died asleep after its last
        call and was never woken again (a rank woken finds it dead and says so): a fault the
        run survived, noted like the others."""
        async def account(worker: Any) -> Any:
            # Each on its own clock: a worker still starting (its pipeline ended first) or gone
            # does not cost the others theirs.
            return await asyncio.wait_for(worker.cpu_account.remote(), ACCOUNT_TIMEOUT_S)

        ranks = list(self.workers)
        accounts = await asyncio.gather(*(account(self.workers[r]) for r in ranks), return_exceptions=True)
        for dp_rank, found in zip(ranks, accounts, strict=True):
            if isinstance(found, dict):
                self.p.worker_cpu(found)
            elif isinstance(found, ACTOR_GONE):  # died asleep and never woken: no work was lost
                self._worker_died(f"rank {dp_rank}: its sleeping worker had died "
                                  "(found when the pipeline ended; it held no trajectories)")

    # --- workers and weights --------------------------------------------------------------

    async def prestart(self) -> None:
        """Create every rank's worker now (asleep: no weights), one at a time."""
        rollout = self.p.setup.spec.rollout
        for dp_rank in range(rollout.num_ranks):
            if dp_rank not in self.workers:
                await self._new_worker(dp_rank, rollout.bundle(dp_rank))

    async def _new_worker(self, dp_rank: int, gpus: tuple[int, ...]) -> Any:
        """Start rank `dp_rank`'s worker on `gpus` and wait until it is up. Never twice at once
        for a rank: the init's prestart ends before any expansion can come."""
        p = self.p
        t_created = p.now()
        worker = RemoteRolloutWorker.options(**p.pool.actor_options(gpus)).remote(
            p.pipeline_id, dp_rank, p.pool.visible_devices(gpus), p.workload.engine_factory(), p.t0_wall
        )
        self.workers[dp_rank] = worker
        await p.adopt(worker)
        # Bounded: a bundle on a node that is gone never places the actor.
        await asyncio.wait_for(worker.__ray_ready__.remote(), START_TIMEOUT_S)  # type: ignore[union-attr]  # Ray types an actor handle as its class too
        p.worker_started(dp_rank, await worker.started_cpu_s.remote(), t_created, p.now())  # type: ignore[attr-defined]  # a Ray actor method's .remote is not typed
        return worker

    async def _wake(self, rank: Rank) -> None:
        with self.p.spans.span(ROLLOUT_CLUSTER, rank.dp_rank, rank.gpus, "loading", "load"):
            weights = dict(self.weights)
            await asyncio.wait_for(rank.worker.wake.remote(weights), WAKE_TIMEOUT_S)
            rank.versions = {a: v for a, (v, _r) in weights.items()}

    def published(self, adapter: str, version: int, ref: list[Any]) -> None:
        self.weights[adapter] = (version, ref)

    async def sync_idle(self) -> None:
        """Bring every active rank that is not generating up to date (busy ones catch up
        before their next call)."""
        idle = [r for r in self.active.values() if not r.lock.locked()]
        await asyncio.gather(*(self._sync_locked_rank(r) for r in idle))

    async def _sync_locked_rank(self, rank: Rank) -> None:
        async with rank.lock:
            if rank.active:  # a leaving rank sleeps next; its next wake loads the newest weights
                await self._sync(rank)

    async def _sync(self, rank: Rank) -> None:
        stale = [(a, v, ref) for a, (v, ref) in self.weights.items() if rank.versions.get(a) != v]
        if not stale:
            return
        with self.p.spans.span(ROLLOUT_CLUSTER, rank.dp_rank, rank.gpus, "loading", "sync"):
            for adapter, version, ref in stale:
                await rank.worker.update.remote(adapter, version, ref)
                rank.versions[adapter] = version

    # --- the feeding loop -----------------------------------------------------------------

    async def _loop(self, rank: Rank) -> None:
        queue = self.p.queue
        try:
            while rank.active:
                items = queue.take(self._call_size())
                if not items:
                    queue.changed.clear()
                    await queue.changed.wait()
                    continue
                rank.in_flight = items
                attempts = await self._generate(rank, items)
                rank.in_flight = []
                if attempts is None:
                    self._requeue_lost(rank, items)
                    if not rank.active or self.closing:
                        # Shrunk or ending meanwhile: the rank's next expansion, if any, starts
                        # a new worker (the death is reported once, here).
                        self._let_go(rank.dp_rank)
                        break
                    await self._replace_worker(rank)
                    continue
                await self.p.attempts_done(attempts)
        except asyncio.CancelledError:
            if rank.in_flight:
                self._requeue_lost(rank, rank.in_flight)
                rank.in_flight = []
            raise

    def _call_size(self) -> int:
        """How many trajectories a rank takes for its next call: `max_batch_per_rank`, or with
        `balance` at most an even share of those open over the ranks, expanding ones counted,
        so a few trajectories spread over the ranks instead of filling the first (the
        simulator's `engine.balance`, at the grain of a call)."""
        setup = self.p.setup
        if not setup.balance:
            return setup.max_batch_per_rank
        num_ranks = max(1, len(self.active) + self._num_expanding)
        return max(1, min(setup.max_batch_per_rank, math.ceil(self.p.queue.num_open / num_ranks)))

    async def _generate(self, rank: Rank, items: list[Trajectory]) -> list[Attempt] | None:
        with self.p.spans.span(ROLLOUT_CLUSTER, rank.dp_rank, rank.gpus, "busy", "rollout") as drop:
            try:
                async with rank.lock:
                    await self._sync(rank)
                    attempts: list[Attempt] = await rank.worker.generate.remote(items)
            except ACTOR_GONE as exc:
                drop()
                self._worker_died(f"rank {rank.dp_rank}: its worker died mid-call ({type(exc).__name__}); its "
                                  f"{len(items)} trajectories re-queued, the rank gets a new worker", exc)
                return None
        return attempts

    def _worker_died(self, detail: str, cause: BaseException | None = None) -> None:
        """A rollout worker found dead: a fault the run survived. Not once the end has killed
        the workers: every call still under way then fails (a rank being shrunk or draining,
        an expansion the end stopped waiting for), and none of those is a death."""
        if self.workers_killed:
            return
        log.warning("%s %s%s", self.p.pipeline_id, detail, f" ({cause})" if cause is not None else "")
        self.p.fault("rollout_worker_died", detail)

    def _let_go(self, dp_rank: int) -> bool:
        """Forget the rank's dead worker (its next expansion starts a new one, a restart); False
        if it was already let go."""
        if self.workers.pop(dp_rank, None) is None:
            return False
        self.num_restarts += 1
        return True

    def _requeue_lost(self, rank: Rank, items: list[Trajectory]) -> None:
        """Trajectories whose worker is gone: re-queued as they were when handed out."""
        now = self.p.now()
        attempts = [Attempt(t, rank.dp_rank, rank.versions.get(t.adapter, -1), now, now) for t in items]
        self.p.record(attempts)
        self.p.queue.put_back(items)
        self.p.report_progress()

    async def _replace_worker(self, rank: Rank) -> None:
        self.num_restarts += 1
        old = self.workers.pop(rank.dp_rank, None)
        if old is not None:
            await kill_and_confirm([old], timeout_s=5.0)
        rank.worker = await self._new_worker(rank.dp_rank, rank.gpus)
        await self._wake(rank)

    def num_returning(self) -> int:
        """Trajectories on ranks being shrunk: queued again once their worker hands them back."""
        return sum(len(rank.in_flight) for rank in self.leaving.values())

    def snapshot(self) -> dict[str, Any]:
        return {
            "active": sorted(self.active),
            "in_flight": {r: len(rank.in_flight) for r, rank in self.active.items()},
            "workers": {r: w for r, w in self.workers.items()},
            "restarts": self.num_restarts,
        }


def on_error(callback: Callable[[BaseException], None]) -> Callable[[asyncio.Task[Any]], None]:
    """A task done-callback that hands an unexpected exception to `callback`."""

    def done(task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            callback(task.exception())  # type: ignore[arg-type]

    return done
