"""The orchestrator's calls for API pipelines (custom or external ones, RLix style).

A pipeline that does not run an rlix program drives the core itself:

    pid = allocate_pipeline_id("mine")
    register_pipeline(spec, handler)        # handler: an actor with expand/shrink/revoke, or None
    admit_pipeline(pid)
    gpus = request(pid, "actor_train", 1)   # returns once the grant is applied
    release_and_request(pid, "actor_train", "actor_infer", 6, estimate=64)
    progress(pid, remaining)  ...  train_step_finished(pid, version)  ...  remove_pipeline(pid)

Rollout (`actor_infer` at priority 6) is elastic: `request` returns at once and ranks come and
go by the handler's `expand(dp_rank, gpus)` / `shrink(dp_rank, gpus, reason)` (an exception
there reports the decision failed, and three shrinks of the pipeline failed in a row have it
killed; one that takes longer than `handler_timeout_s`, 900 s by default, has its pipeline
killed, handler included, since its GPUs cannot be handed on while it may still be loading
them); without a handler, expansions and shrinks are applied at
once and `active_ranks` tells which ranks the pipeline may use. `withdraw` takes back a
request not granted yet (`RequestWithdrawn`): a pending gang request leaves the queue, rollout
demand ends.
"""

from __future__ import annotations

import asyncio
import math
import numbers
from typing import TYPE_CHECKING, Any

import ray

from rlix.policy import events as ev
from rlix.policy.specs import BASE_ADAPTER, ROLLOUT_CLUSTER, PipelineSpec, Priority
from rlix.runs.codec import spec_from_dict
from rlix.runs.host import STAGE_COLUMNS

if TYPE_CHECKING:
    from rlix.executor.records import PipelineRecord
    from rlix.runs.loop import Loop

#: How long a handler's expand or shrink may take by default before its pipeline is taken for
#: hung and killed: a rank that never comes up (or never goes) would otherwise keep its GPUs
#: from every other pipeline. Generous, as an engine loading a large model takes minutes.
DEFAULT_HANDLER_TIMEOUT_S = 900.0


#: What the orchestrator calls on an API pipeline's handler.
HANDLER_METHODS = ("expand", "shrink", "revoke")


def _check_handler(handler: Any) -> None:
    """Refuse a handler the orchestrator cannot call, at registration: taken as it is, every
    expansion of the pipeline would fail later with an AttributeError that says nothing of
    the cause (the handler must be a Ray actor's handle)."""
    if handler is None:
        return
    if isinstance(handler, ray.actor.ActorClass):
        raise TypeError("handler: got an actor class, not an actor; pass an instance of it, e.g. MyHandler.remote()")
    if not isinstance(handler, ray.actor.ActorHandle):
        raise TypeError(f"handler: got a {type(handler).__name__} object, not a Ray actor; wrap its class with "
                        "ray.remote and pass MyHandler.remote() (or None to poll active_ranks)")
    missing = [name for name in HANDLER_METHODS if not hasattr(handler, name)]
    if missing:
        raise TypeError(f"handler: the actor has no {', '.join(missing)} method; subclass "
                        "rlix.executor.api.RankHandler (it has them all)")


class ExternalApi:
    pipelines: dict[str, PipelineRecord]
    loop: Loop

    def now(self) -> float:
        raise NotImplementedError

    def _api_record(self, pipeline_id: str) -> PipelineRecord:
        record = self.pipelines.get(pipeline_id)
        if record is None:
            raise KeyError(f"no pipeline {pipeline_id!r}")
        if record.host is not None:
            raise ValueError(f"pipeline {pipeline_id!r} runs a program; its host makes these calls")
        if not record.alive:
            raise RuntimeError(f"pipeline {pipeline_id!r} is {record.status}")
        return record

    def allocate_pipeline_id(self, prefix: str = "pipeline") -> str:
        """A pipeline id no pipeline of this run has used."""
        for n in range(1, 1_000_000):
            candidate = f"{prefix}-{n}"
            if candidate not in self.pipelines:
                return candidate
        raise RuntimeError("no free pipeline id")

    def register_pipeline(self, spec: PipelineSpec | dict[str, Any], handler: Any = None,
                          handler_timeout_s: float | None = DEFAULT_HANDLER_TIMEOUT_S) -> str:
        from rlix.executor.records import PipelineRecord

        if handler_timeout_s is not None and not (isinstance(handler_timeout_s, int | float)
                                                  and 0 < handler_timeout_s < math.inf):
            raise ValueError(f"handler_timeout_s={handler_timeout_s!r}: give a number of seconds above 0, "
                             "or None to wait for a handler forever")
        _check_handler(handler)
        if isinstance(spec, dict):
            spec = spec_from_dict(spec)
        if spec.pipeline_id in self.pipelines:
            raise ValueError(f"pipeline id {spec.pipeline_id!r} is taken")
        self.loop.send(ev.PipelineRegistered(self.now(), spec))  # validates the spec
        self.pipelines[spec.pipeline_id] = PipelineRecord(spec.pipeline_id, spec, handler=handler,
                                                          handler_timeout_s=handler_timeout_s)
        return spec.pipeline_id

    def admit_pipeline(self, pipeline_id: str) -> None:
        record = self._api_record(pipeline_id)
        self.loop.send(ev.PipelineAdmitted(self.now(), pipeline_id))
        record.admitted = True
        record.admitted_s = self.now()

    async def request(self, pipeline_id: str, cluster: str, priority: int,
                      estimate: float | None = None) -> tuple[int, ...] | None:
        """Ask for a cluster; returns its GPUs once granted (None if withdrawn meanwhile).
        Rollout returns () at once: its ranks are expanded on the handler."""
        record = self._api_record(pipeline_id)
        future = self._grant_future(record, cluster, priority)
        self._send_request(record, cluster, ev.ClusterRequested(self.now(), pipeline_id, cluster, priority, estimate))
        return await self._await_grant(record, cluster, future)

    async def release_and_request(self, pipeline_id: str, released: str, cluster: str, priority: int,
                                  estimate: float | None = None) -> tuple[int, ...] | None:
        """Release one cluster and request another as one atomic step."""
        record = self._api_record(pipeline_id)
        future = self._grant_future(record, cluster, priority)
        self._send_request(record, cluster, ev.ClusterReleasedAndRequested(self.now(), pipeline_id, released, cluster, priority, estimate))
        return await self._await_grant(record, cluster, future)

    def release(self, pipeline_id: str, cluster: str) -> None:
        self._api_record(pipeline_id)
        self.loop.send(ev.ClusterReleased(self.now(), pipeline_id, cluster))

    def withdraw(self, pipeline_id: str, cluster: str) -> None:
        """Take back a request not granted yet (rollout: end the rollout demand); the waiting
        `request` call returns None."""
        record = self._api_record(pipeline_id)
        future = record.grant_waiters.pop(cluster, None)
        record.requested_at.pop(cluster, None)
        if future is None and cluster != ROLLOUT_CLUSTER:
            raise ValueError(f"pipeline {pipeline_id!r} has no pending request for {cluster!r} "
                             "(a granted cluster is released, not withdrawn)")
        self.loop.send(ev.RequestWithdrawn(self.now(), pipeline_id, cluster))
        if future is not None and not future.done():
            future.set_result(None)

    def abandon_request(self, pipeline_id: str, cluster: str) -> None:
        """The caller stopped waiting for its `request` of `cluster` (Ctrl-C): take the request
        back, or release the cluster if it was granted meanwhile, as nobody has its GPUs."""
        record = self.pipelines.get(pipeline_id)
        if record is None or not record.alive:
            return
        if cluster in record.grant_waiters:
            self.withdraw(pipeline_id, cluster)
            return
        state = self.loop.scheduler.pipelines.get(pipeline_id)
        if state is not None and cluster in state.holdings:
            self.loop.send(ev.ClusterReleased(self.now(), pipeline_id, cluster))

    def progress(self, pipeline_id: str, remaining: float | dict[str, float]) -> None:
        """Rollout work left: one number, or one per adapter."""
        self._api_record(pipeline_id)
        items = remaining.items() if isinstance(remaining, dict) else [(None, remaining)]
        for _adapter, value in items:
            # float() would take "3" and say of None only that it is not a number.
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"remaining={remaining!r}: give the rollout work left as a number, "
                                "or a dict of one number per adapter")
        for adapter, value in items:
            self.loop.send(ev.RolloutProgressed(self.now(), pipeline_id, float(value), adapter))

    def train_step_finished(self, pipeline_id: str, version: int, adapter: str | None = None) -> None:
        """A train step ended: weights `version` (the step's number + 1) are out. Its row in
        the steps table runs from the end of the adapter's step before (or the admission) to
        now; how it spent that time is the pipeline's own, so its stage columns are 0."""
        record = self._api_record(pipeline_id)
        now = self.now()
        name = adapter or BASE_ADAPTER
        # The core first: a step it rejects (version 0, going backwards, an unknown adapter)
        # must leave no row, or the steps table disagrees with the log.
        self.loop.send(ev.TrainStepFinished(now, pipeline_id, version, adapter))
        self.loop.recorder.add_step({"pipeline_id": pipeline_id, "adapter": name, "step": version - 1,
                                     "t_start": record.step_ends.get(name, record.admitted_s), "t_end": now,
                                     **dict.fromkeys(STAGE_COLUMNS, 0.0)})
        record.step_ends[name] = now

    def active_ranks(self, pipeline_id: str) -> dict[int, tuple[int, ...]]:
        """The ranks of a handler-less API pipeline that are active now."""
        record = self.pipelines.get(pipeline_id)
        if record is None:
            raise KeyError(f"no pipeline {pipeline_id!r}")
        return dict(record.ranks)

    def remove_pipeline(self, pipeline_id: str) -> None:
        """The pipeline is done and its processes stopped: its GPUs go back."""
        record = self._api_record(pipeline_id)
        record.status = "finished"
        record.cancel_waits("was removed")
        self.loop.send(ev.PipelineRemoved(self.now(), pipeline_id, False))

    # --- helpers --------------------------------------------------------------------------

    def _grant_future(self, record: PipelineRecord, cluster: str, priority: int) -> asyncio.Future[Any] | None:
        if priority == Priority.ROLLOUT:
            return None
        if cluster in record.grant_waiters:
            raise ValueError(f"pipeline {record.pipeline_id!r} already waits for {cluster!r}: wait for that "
                             f"request's grant, or take it back with withdraw({record.pipeline_id!r}, {cluster!r})")
        # Made before the event: the grant may be applied while the event is handled.
        future = record.grant_waiters[cluster] = asyncio.get_running_loop().create_future()
        return future

    def _send_request(self, record: PipelineRecord, cluster: str,
                      event: ev.ClusterRequested | ev.ClusterReleasedAndRequested) -> None:
        # When it was asked for, for its row in the waits table once granted (the actuator).
        record.requested_at[cluster] = (event.priority, event.now)
        try:
            self.loop.send(event)
        except Exception:
            record.grant_waiters.pop(cluster, None)
            record.requested_at.pop(cluster, None)
            raise

    async def _await_grant(self, record: PipelineRecord, cluster: str,
                           future: asyncio.Future[Any] | None) -> tuple[int, ...] | None:
        if future is None:
            return ()
        try:
            return await future  # type: ignore[no-any-return]
        finally:
            if record.grant_waiters.get(cluster) is future:
                del record.grant_waiters[cluster]
