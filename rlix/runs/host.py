"""The driver-agnostic side of one pipeline: runs its program's ops against the core.

A driver runs each thread of a pipeline program (`rlix.pipelines`) with a few lines of its
own (SimPy `yield` in the simulator, `await` in the executor):

    value = None
    while True:
        op = program.send(value)                      # StopIteration: host.thread_finished(thread)
        kind, x = host.step(op, thread)
        while kind is WORK:                           # a stage, a batch submission, a weight sync
            t0 = now; result = <do x>; kind, x = host.finish(x, result, t0)
            if kind is RETRY: <wait for x>; kind, x = WORK, op   # the stage's GPUs were revoked
        if kind is WAIT: value = <wait for x>         # a future made by `futures.new()`
        elif kind is FORK: <start a thread running x>; value = None
        else: value = x

Everything else is here, once: which core event each op becomes, the atomic
release-then-request (a Release is held back until the thread's next op: a Request makes the
two one `ClusterReleasedAndRequested`, and so does an await of a batch already done followed by
a Request; any other op, or an await that must wait, sends the release alone), asking for the
rollout cluster when a batch is submitted and giving it back when no batch is left, staleness
pacing, and the `steps` and `waits` rows of the record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from rlix.pipelines import ops
from rlix.pipelines.config import ProgramConfig
from rlix.policy import events as ev
from rlix.policy.decisions import Place, Revoke
from rlix.policy.homes import with_mappings
from rlix.policy.specs import BASE_ADAPTER, ROLLOUT_CLUSTER, PipelineSpec, Priority
from rlix.runs.loop import Loop

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler

WAIT, WORK, VALUE, FORK, RETRY = "wait", "work", "value", "fork", "retry"
#: The stage columns of the steps table, in the order of a full-finetune step.
STAGE_COLUMNS = ("rollout_s", "values_s", "old_log_probs_s", "ref_log_probs_s", "critic_train_s",
                 "actor_train_s", "checkpoint_s", "sync_s")

F = TypeVar("F")


class Futures(Protocol[F]):
    """A driver's one-shot futures: SimPy events, or asyncio futures."""

    def new(self) -> F: ...

    def resolve(self, future: F, value: Any) -> None: ...


@dataclass
class _Batch:
    t_submitted: float
    done: bool = False
    result: Any = None


def program_under(config: ProgramConfig, scheduler: Scheduler) -> ProgramConfig:
    """`config` as the running policy has its pipelines run it: whether they prefetch their
    weights before their inits (`Policy.prefetches`). Both drivers start programs from this."""
    prefetch = type(scheduler.policy).prefetches(scheduler.config)
    return config if config.prefetch_weights == prefetch else dataclasses.replace(config, prefetch_weights=prefetch)


class Host(Generic[F]):
    def __init__(self, loop: Loop, spec: PipelineSpec, config: ProgramConfig, futures: Futures[F]) -> None:
        self.loop = loop
        self.spec = spec
        self.config = config
        self.pipeline_id = spec.pipeline_id
        self.futures = futures
        self.clock: Callable[[], float] = loop.clock
        self.rolling = False
        self.alive = False
        self.init_s = 0.0
        self._num_threads = 0
        self._deferred: dict[Any, list[str]] = {}  # thread -> clusters whose release is held back
        self._grant_wait: dict[str, F] = {}
        self._placed_wait: list[F] = []
        self._requested_at: dict[str, tuple[int, float]] = {}
        self._priority_of: dict[str, int] = {}
        self._revocations: dict[str, int] = {}
        self._allowed: dict[str, int] = {}
        self._allow_wait: dict[tuple[str, int], list[F]] = {}
        self._batches: dict[tuple[str, int], _Batch] = {}
        self._batch_wait: dict[tuple[str, int], list[tuple[Any, F, bool]]] = {}
        self._outstanding: set[tuple[str, int]] = set()
        self._remaining: dict[str, int] = {}
        #: What the last RanksProgressed said (see ranks_progress); reset with each rollout.
        self._ranks_key: tuple[bool, tuple[int, ...] | None] | None = None
        self._steps: dict[tuple[str, int], dict[str, Any]] = {}

    # --- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Register and admit the pipeline; the driver then starts its main thread. A pipeline
        resumed from a checkpoint (`config.start_steps`) first tells the core which weight
        versions exist, so staleness pacing lets its next step roll out."""
        self.alive = True
        self.loop.hosts[self.pipeline_id] = self
        now = self.clock()
        self.loop.send(ev.PipelineRegistered(now, self.spec))
        for adapter, step in self.config.start_steps:
            if step > 0:
                name = None if adapter == BASE_ADAPTER else adapter
                self.loop.send(ev.TrainStepFinished(now, self.pipeline_id, step, name))
        self.loop.send(ev.PipelineAdmitted(now, self.pipeline_id))

    def thread_started(self) -> None:
        self._num_threads += 1

    def thread_finished(self, thread: Any) -> None:
        self._flush(self._deferred.pop(thread, None))
        self._num_threads -= 1
        if self._num_threads == 0 and self.alive:
            self._remove(failed=False)

    def kill(self) -> None:
        """The pipeline crashed or was killed: every GPU it holds goes back at once."""
        if self.alive:
            self._remove(failed=True)

    def _remove(self, failed: bool) -> None:
        self.alive = False
        self.loop.send(ev.PipelineRemoved(self.clock(), self.pipeline_id, failed))

    # --- ops ------------------------------------------------------------------------------

    def step(self, op: ops.Op, thread: Any) -> tuple[str, Any]:
        """What the driver does next for `op` of `thread`."""
        if not self.alive:
            raise RuntimeError(f"pipeline {self.pipeline_id} is no longer running")
        deferred = self._deferred.pop(thread, None)
        if isinstance(op, ops.Request):
            return WAIT, self._request(op, deferred)
        if isinstance(op, ops.AwaitBatch | ops.AwaitAnyBatch):
            keys = ((op.adapter, op.step),) if isinstance(op, ops.AwaitBatch) else op.keys
            ready = self._ready_batch(op, keys)
            if ready is not None:
                if deferred:  # nothing to wait for: the release may still join a request next
                    self._deferred[thread] = deferred
                return VALUE, ready[0]
            self._flush(deferred)
            future = self.futures.new()
            wants_key = isinstance(op, ops.AwaitAnyBatch)
            for key in keys:
                self._batch_wait.setdefault(key, []).append((thread, future, wants_key))
            return WAIT, future
        self._flush(deferred)
        if isinstance(op, ops.Release):
            self._deferred[thread] = [op.cluster]
            return VALUE, None
        if isinstance(op, ops.Work):
            if isinstance(op, ops.Stage):
                self._revocations.setdefault(op.cluster, 0)
            return WORK, op
        if isinstance(op, ops.AwaitAllowed):
            if self._allowed.get(op.adapter, -1) >= op.step:
                return VALUE, None
            future = self.futures.new()
            self._allow_wait.setdefault((op.adapter, op.step), []).append(future)
            return WAIT, future
        if isinstance(op, ops.Fork):
            return FORK, op.program
        if isinstance(op, ops.AwaitPlaced):
            if self.spec.placed:
                return VALUE, None
            future = self.futures.new()
            self._placed_wait.append(future)
            return WAIT, future
        raise TypeError(f"not a pipeline op: {op!r}")

    def _ready_batch(self, op: ops.AwaitBatch | ops.AwaitAnyBatch, keys: tuple[Any, ...]) -> tuple[Any] | None:
        """What the await returns, in a 1-tuple, if a batch of `keys` it waits for is done
        already (else None): the batch's result, or for AwaitAnyBatch the key of the first done
        one in order."""
        for key in keys:
            batch = self._batches.get(key)
            if batch is not None and batch.done:
                return (batch.result if isinstance(op, ops.AwaitBatch) else key,)
        return None

    def finish(self, op: ops.Work, result: Any, t_start: float) -> tuple[str, Any]:
        """The driver finished the work of `op`, started at `t_start`."""
        now = self.clock()
        if isinstance(op, ops.Stage):
            if self._revocations.get(op.cluster, 0):
                # The stage lost its GPUs midway: the core re-queued its request; redo it.
                self._revocations[op.cluster] = 0
                return RETRY, self._grant_future(op.cluster)
            if op.step < 0:
                self.init_s += now - t_start
            else:
                self._step_row(op.adapter, op.step)[f"{op.stage}_s"] += now - t_start
            return VALUE, result
        if isinstance(op, ops.Generate):
            self._submitted(op, result, now)
            return VALUE, None
        if isinstance(op, ops.Checkpoint):
            self._step_row(op.adapter, op.version - 1)["checkpoint_s"] += now - t_start
            return VALUE, result
        if isinstance(op, ops.Prefetch):
            self.loop.recorder.add_prefetch(self.pipeline_id, now - t_start)
            return VALUE, None
        row = self._step_row(op.adapter, op.version - 1)
        row["sync_s"] += now - t_start
        row["t_end"] = now
        self.loop.recorder.add_step(row)
        adapter = None if op.adapter == BASE_ADAPTER else op.adapter
        self.loop.send(ev.TrainStepFinished(now, self.pipeline_id, op.version, adapter))
        return VALUE, None

    # --- requests and releases ------------------------------------------------------------

    def _grant_future(self, cluster: str) -> F:
        future = self._grant_wait.get(cluster)
        if future is None:
            future = self._grant_wait[cluster] = self.futures.new()
        return future

    def _request(self, op: ops.Request, deferred: list[str] | None) -> F:
        now = self.clock()
        future = self._grant_future(op.cluster)  # before the event: a grant may apply at once
        self._requested_at[op.cluster] = (op.priority, now)
        self._priority_of[op.cluster] = op.priority
        released = deferred.pop() if deferred else None
        self._flush(deferred)
        if released is None:
            self.loop.send(ev.ClusterRequested(now, self.pipeline_id, op.cluster, op.priority))
        else:
            self._released(released)
            self.loop.send(ev.ClusterReleasedAndRequested(now, self.pipeline_id, released, op.cluster, op.priority))
        return future

    def _flush(self, clusters: list[str] | None) -> None:
        for cluster in clusters or ():
            self._released(cluster)
            self.loop.send(ev.ClusterReleased(self.clock(), self.pipeline_id, cluster))

    def _released(self, cluster: str) -> None:
        if cluster == ROLLOUT_CLUSTER:
            self.rolling = False

    def granted(self, cluster: str) -> None:
        """The loop saw the grant of `cluster` applied."""
        requested = self._requested_at.pop(cluster, None)
        if requested is not None:
            priority, t_request = requested
            self.loop.recorder.add_wait(self.pipeline_id, cluster, priority, t_request, self.clock())
        future = self._grant_wait.pop(cluster, None)
        if future is not None:
            self.futures.resolve(future, None)

    def placed(self, decision: Place) -> None:
        """The core placed the pipeline's sized home: its spec maps every cluster from now on."""
        self.spec = with_mappings(self.spec, decision.home, decision.mappings)
        for future in self._placed_wait:
            self.futures.resolve(future, None)
        self._placed_wait.clear()

    def revoked(self, decision: Revoke) -> None:
        if decision.dp_rank < 0:
            self._revocations[decision.cluster] = self._revocations.get(decision.cluster, 0) + 1
            self._requested_at[decision.cluster] = (self._priority_of.get(decision.cluster, -1), self.clock())

    # --- staleness pacing and rollout -----------------------------------------------------

    def allow(self, adapter: str, max_step: int) -> None:
        self._allowed[adapter] = max(self._allowed.get(adapter, -1), max_step)
        for key in [k for k in self._allow_wait if k[0] == adapter and k[1] <= max_step]:
            for future in self._allow_wait.pop(key):
                self.futures.resolve(future, None)

    def _submitted(self, op: ops.Generate, remaining: dict[str, int], now: float) -> None:
        key = (op.adapter, op.step)
        self._batches[key] = _Batch(now)
        self._outstanding.add(key)
        self._step_row(op.adapter, op.step)["t_start"] = now
        for thread_releases in self._deferred.values():  # rollout goes on: keep the cluster
            if ROLLOUT_CLUSTER in thread_releases:
                thread_releases.remove(ROLLOUT_CLUSTER)
                self.rolling = True
        if self.rolling:
            self.progress(remaining)
            return
        self._remaining = {}
        self._ranks_key = None
        self.rolling = True
        self.loop.send(ev.ClusterRequested(now, self.pipeline_id, ROLLOUT_CLUSTER, Priority.ROLLOUT,
                                           float(sum(remaining.values()))))
        # The first report follows at once (RLix's streams report T and C = 0 at the start), so
        # a pipeline preempted to zero before its first completion still shows its demand.
        self.progress(remaining)

    def progress(self, remaining: dict[str, int]) -> None:
        """Rollout work still to do, per adapter (trajectories queued or running)."""
        if not self.rolling or not self.alive:
            return
        now = self.clock()
        for adapter, count in remaining.items():
            if self._remaining.get(adapter) != count:
                self._remaining[adapter] = count
                name = None if adapter == BASE_ADAPTER else adapter
                self.loop.send(ev.RolloutProgressed(now, self.pipeline_id, float(count), name))

    @property
    def ranks_queued(self) -> bool:
        """Whether the last report said work was queued (then only its end needs a report)."""
        return self._ranks_key is not None and self._ranks_key[0]

    def ranks_progress(self, in_flight: dict[int, int], queued: int) -> None:
        """Where the rollout work is: trajectories running per active rank, and queued. Sent
        when it changes what the policy acts on: whether anything is queued, and while nothing
        is, which ranks are busy (a report per completion would be a decision round each)."""
        if not self.rolling or not self.alive:
            return
        key = (queued > 0, None if queued else tuple(sorted(r for r, n in in_flight.items() if n)))
        if key == self._ranks_key:
            return
        self._ranks_key = key
        pairs = tuple(sorted(in_flight.items()))
        self.loop.send(ev.RanksProgressed(self.clock(), self.pipeline_id, pairs, queued))

    def batch_done(self, adapter: str, step: int, result: Any = None) -> None:
        """Every trajectory of (`adapter`, `step`) is complete. `result` is what AwaitBatch
        returns (a dict's numeric entries, e.g. `reward_mean`, also go into the steps row)."""
        key = (adapter, step)
        batch = self._batches[key]
        batch.done, batch.result = True, result
        self._outstanding.discard(key)
        row = self._step_row(adapter, step)
        row["rollout_s"] = self.clock() - batch.t_submitted
        if isinstance(result, dict):
            row.update({k: v for k, v in result.items() if isinstance(v, int | float)})
        waiters = self._batch_wait.pop(key, [])
        for other in self._batch_wait.values():  # an AwaitAnyBatch waits on several keys
            other[:] = [w for w in other if all(w[1] is not f for _t, f, _a in waiters)]
        if not self._outstanding and self.rolling and self.alive:
            if waiters:  # released atomically with the waiting thread's next request
                self._deferred.setdefault(waiters[0][0], []).append(ROLLOUT_CLUSTER)
            else:
                self._flush([ROLLOUT_CLUSTER])
        for _thread, future, wants_key in waiters:
            self.futures.resolve(future, key if wants_key else result)

    def _step_row(self, adapter: str, step: int) -> dict[str, Any]:
        row = self._steps.get((adapter, step))
        if row is None:
            row = self._steps[(adapter, step)] = {
                "pipeline_id": self.pipeline_id, "adapter": adapter, "step": step,
                "t_start": self.clock(), "t_end": float("nan"), **{c: 0.0 for c in STAGE_COLUMNS},
            }
        return row
