"""How the executor carries the core's decisions out (the `rlix.runs.Actuator` of the Ray driver).

- Grant: the pipeline is waiting for it (a program's Request, or an API `request` call), so it
  is applied at once; the waiting call resumes (for a program, through `Loop.applied` and its
  host's future). The trainer moves its model onto the GPUs as part of the stage that follows.
- Expand / Shrink: the pipeline's handler actor (the pipeline actor of a program, or the actor
  an API pipeline registered) wakes or stops that rank, then the decision is reported applied;
  an exception reports it failed (the core undoes it, and retries a shrink after its back-off);
  a dead handler removes the pipeline, which settles the decision, and so do
  `MAX_FAILED_SHRINKS` shrinks of one pipeline failed in a row (its GPUs go to nobody else while
  its handler cannot free them, so without that bound everyone waiting for them waits for good).
  An API pipeline without a handler polls `active_ranks`: its expansions and shrinks are
  applied at once.
- Revoke (a lost GPU): the handler is told, nothing is reported.

Every call runs as its own asyncio task, so a slow expansion never holds up the orchestrator;
the loop orders decisions that depend on one another (`requires`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from ray.exceptions import RayTaskError

from rlix.executor.actors import ACTOR_GONE, failure_reason
from rlix.policy import decisions as dec
from rlix.policy import events as ev

if TYPE_CHECKING:
    from rlix.executor.orchestrator import Orchestrator

log = logging.getLogger(__name__)

#: Shrinks of one pipeline's ranks that may fail in a row before the pipeline is taken down.
MAX_FAILED_SHRINKS = 3


class RayActuator:
    def __init__(self, orchestrator: Orchestrator) -> None:
        self.orch = orchestrator
        self.tasks: set[asyncio.Task[Any]] = set()
        #: (decision kind, seconds from carry-out to report) of every expand and shrink.
        self.durations: list[tuple[str, float]] = []
        #: What went wrong with decisions reported failed (for logs and tests).
        self.failures: list[str] = []
        #: Per pipeline, its shrinks failed since its last one applied.
        self.failed_shrinks: dict[str, int] = {}

    def carry_out(self, decision: dec.Grant | dec.Expand | dec.Shrink) -> None:
        orch = self.orch
        record = orch.pipelines.get(decision.pipeline_id)
        if isinstance(decision, dec.Grant):
            if record is not None:
                record.granted(decision.cluster, decision.gpus)
                requested = record.requested_at.pop(decision.cluster, None)
                if requested is not None:  # an API pipeline's wait, as a program's host records its own
                    orch.recorder.add_wait(decision.pipeline_id, decision.cluster, requested[0], requested[1],
                                           orch.now())
            orch.loop.applied(decision.decision_id)
            return
        if record is None or record.handler is None:
            if record is not None:
                record.track_rank(decision)
            orch.loop.applied(decision.decision_id)
            return
        self._start(self._call(record.handler, decision, record.handler_timeout_s))

    def wake_at(self, at_s: float) -> None:
        # The orchestrator ticks every second anyway; this makes a reclaim punctual.
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # outside the event loop (setup, shutdown): the ticks will do
            return
        loop.call_later(max(at_s - self.orch.now(), 0.0), self._wake)

    def _wake(self) -> None:
        orch = self.orch
        if any(r.alive for r in orch.pipelines.values()):
            orch.loop.send(ev.Tick(orch.now()))

    def revoke(self, decision: dec.Revoke) -> None:
        record = self.orch.pipelines.get(decision.pipeline_id)
        if record is None:
            return
        if record.handler is None:
            record.track_rank(decision)
            return
        self._start(self._notify(record.handler, decision))

    def _start(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _call(self, handler: Any, decision: dec.Expand | dec.Shrink, timeout_s: float | None) -> None:
        loop, clock = self.orch.loop, self.orch.now
        t0 = clock()
        try:
            if isinstance(decision, dec.Expand):
                call = handler.expand.remote(decision.dp_rank, decision.gpus)
            else:
                # A drain is passed only when there is one: handlers written before it still work.
                extra = (decision.drain_s,) if decision.drain_s > 0 else ()
                call = handler.shrink.remote(decision.dp_rank, decision.gpus, decision.reason, *extra)
                timeout_s = None if timeout_s is None else timeout_s + decision.drain_s
            await asyncio.wait_for(call, timeout_s)
        except TimeoutError:
            # Reporting it failed would hand its GPUs on while the handler may still be loading
            # them; only its removal (which kills the handler first) frees them safely.
            kind = type(decision).__name__.lower()
            await self.orch.pipeline_gone(decision.pipeline_id, f"its handler's {kind} of rank {decision.dp_rank} "
                                          f"took longer than {timeout_s:g} s (handler_timeout_s)")
            return
        except ACTOR_GONE as exc:
            if isinstance(exc, RayTaskError):  # raised inside the handler (e.g. by a worker of its)
                await self._handler_raised(decision, exc)
                return
            # Not reported: the pipeline is gone, and its removal settles the decision (the
            # loop then carries out whatever waited for it, e.g. another pipeline's expansion).
            await self.orch.pipeline_gone(decision.pipeline_id, f"its actor died ({type(exc).__name__})")
            return
        except Exception as exc:  # the handler raised: report, the core undoes the decision
            await self._handler_raised(decision, exc)
            return
        self.durations.append((type(decision).__name__.lower(), clock() - t0))
        if isinstance(decision, dec.Shrink):
            self.failed_shrinks.pop(decision.pipeline_id, None)
        loop.applied(decision.decision_id)

    async def _handler_raised(self, decision: dec.Expand | dec.Shrink, exc: BaseException) -> None:
        """Report the decision failed, unless it is the pipeline's MAX_FAILED_SHRINKS-th shrink
        failed in a row: then the pipeline is taken down (its handler killed first), as one
        whose handler hangs is, since the core would retry for ever meanwhile."""
        pipeline_id = decision.pipeline_id
        if isinstance(decision, dec.Shrink):
            num_failed = self.failed_shrinks[pipeline_id] = self.failed_shrinks.get(pipeline_id, 0) + 1
            if num_failed >= MAX_FAILED_SHRINKS:
                del self.failed_shrinks[pipeline_id]
                await self.orch.pipeline_gone(pipeline_id, f"its handler's shrinks failed {num_failed} times in a row "
                                              f"(the last, of rank {decision.dp_rank}: {failure_reason(exc)[:200]})")
                return
        self._failed(decision, exc)

    def _failed(self, decision: dec.Expand | dec.Shrink, exc: BaseException) -> None:
        # One line: a handler's error comes wrapped by Ray with its whole remote traceback.
        reason = failure_reason(exc)
        log.warning("%s of %s rank %d failed: %s", type(decision).__name__, decision.pipeline_id,
                    decision.dp_rank, reason)
        self.failures.append(f"{type(decision).__name__} {decision.pipeline_id}/{decision.dp_rank}: {reason}")
        self.orch.loop.failed(decision.decision_id, reason[:200])

    async def _notify(self, handler: Any, decision: dec.Revoke) -> None:
        try:
            await handler.revoke.remote(decision.cluster, decision.dp_rank, decision.gpus)
        except Exception as exc:
            log.warning("revoke of %s/%s failed: %s", decision.pipeline_id, decision.cluster, exc)
