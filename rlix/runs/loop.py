"""The one loop between a driver and the policy core, shared by the simulator and the executor.

Every event goes through `Loop.send`: the core handles it, the recorder logs the event and its
decisions, and each decision goes where it belongs:

- Grant, Expand, Shrink go to the driver's actuator (`carry_out`), which reports back with
  `applied` / `failed`. A decision whose `requires` names a shrink not yet applied waits here
  until it is; if a required shrink failed, the decision is reported failed without being
  carried out (the contract of `rlix.policy.decisions`).
- AllowRollout goes to the pipeline's host (staleness pacing), Place too (its spec now maps
  the clusters that follow its home); Revoke to the actuator (abort the stage or rank) and to
  the host; Hold is only recorded.

Events raised while an event is being handled (an actuator that reports at once, a host that
reacts to a grant) are queued and handled in order, never re-entrantly, so the core sees one
sequence of events and `events.jsonl` is exactly that sequence.

A driver that gives a `defer` (run a callable once the moment's other reports are in; the
simulator's is a zero-delay SimPy event) has the applied reports of one moment handed to the
core together, as one `DecisionsApplied` (one decision round for a whole set of weight loads
ending together, instead of one round each). Any other event sends what was gathered first, so
the core still sees every report in the order it came.

A run whose events pile up at one instant without end (`MAX_EVENTS_AT_ONE_INSTANT`) stops with
a `LivelockError` instead of hanging: the policy's decisions are undoing each other.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from rlix.policy import decisions as dec
from rlix.policy import events as ev
from rlix.policy.core import Scheduler
from rlix.runs.errors import LivelockError
from rlix.runs.recorder import Recorder

if TYPE_CHECKING:
    from rlix.runs.host import Host

Moving = dec.Grant | dec.Expand | dec.Shrink

#: More events than this at one instant is a livelock, not a busy moment: decisions that undo
#: each other, carried out in no time (moves that cost nothing in the simulator), would repeat
#: for ever. The most seen at one instant on the bundled scenarios is about 100 (lab-day-1024).
MAX_EVENTS_AT_ONE_INSTANT = 100_000


class Actuator(Protocol):
    """How a driver carries decisions out (SimPy processes, or Ray actor calls)."""

    def carry_out(self, decision: Moving) -> None:
        """Start carrying `decision` out; call `Loop.applied` or `Loop.failed` when done."""

    def revoke(self, decision: dec.Revoke) -> None:
        """A holding lost a GPU: abort the stage or rank (its trajectories are re-queued)."""

    def wake_at(self, at_s: float) -> None:
        """The core wants a round at `at_s` even if nothing happens: send a Tick then (or soon
        after: a driver that ticks every second anyway may ignore it)."""


class Loop:
    def __init__(self, scheduler: Scheduler, recorder: Recorder, actuator: Actuator,
                 clock: Callable[[], float],
                 defer: Callable[[Callable[[], None]], None] | None = None) -> None:
        self.scheduler = scheduler
        self.recorder = recorder
        self.actuator = actuator
        self.clock = clock
        self._defer = defer
        #: Applied reports of this moment not yet handed to the core (with `defer` only).
        self._applied: list[Moving] = []
        self.hosts: dict[str, Host[Any]] = {}
        self._queue: deque[ev.Event] = deque()
        self._draining = False
        #: Decisions carried out or waiting, not yet reported: id -> decision.
        self._unsettled: dict[int, Moving] = {}
        #: Decisions waiting for required shrinks: id of the shrink -> waiting decisions.
        self._waiting_on: dict[int, list[Moving]] = {}
        self._failed_ids: set[int] = set()
        self.num_events = 0
        #: The time of the last event, and how many events in a row have carried it.
        self._instant_s = -math.inf
        self._num_at_instant = 0
        #: Wake-ups asked of the actuator and not yet passed (Scheduler.wake_at_s).
        self._wakes: set[float] = set()

    # --- events in ------------------------------------------------------------------------

    def send(self, event: ev.Event) -> None:
        """Hand `event` to the core (after the events already queued, and the applied reports
        gathered for this moment)."""
        if self._applied:
            self.flush_applied()
        self._queue.append(event)
        if self._draining:
            return
        self._draining = True
        try:
            while self._queue:
                self._handle(self._queue.popleft())
        finally:
            self._draining = False

    def _handle(self, event: ev.Event) -> None:
        if event.now == self._instant_s:
            self._num_at_instant += 1
            if self._num_at_instant > MAX_EVENTS_AT_ONE_INSTANT:
                raise LivelockError(
                    f"the policy handled {self._num_at_instant - 1:,} events at t = {event.now:.3f} s with no"
                    f" time passing: its decisions keep undoing each other, a policy bug (the last"
                    f" event: {type(event).__name__})")
        else:
            self._instant_s, self._num_at_instant = event.now, 1
        decisions = self.scheduler.handle(event)
        self.num_events += 1
        self.recorder.on_event(event, decisions)
        if isinstance(event, ev.PipelineRemoved):
            self._forget(event.pipeline_id)
        for decision in decisions:
            self._dispatch(decision)
        wake = self.scheduler.wake_at_s
        if wake != math.inf and wake not in self._wakes:
            self._wakes = {w for w in self._wakes if w > event.now}
            self._wakes.add(wake)
            self.actuator.wake_at(wake)

    # --- decisions out --------------------------------------------------------------------

    def _dispatch(self, decision: dec.Decision) -> None:
        if isinstance(decision, Moving):
            self._unsettled[decision.decision_id] = decision
            if any(i in self._failed_ids for i in decision.requires):
                self.failed(decision.decision_id, "a required shrink failed")
                return
            pending = [i for i in decision.requires if i in self._unsettled]
            if pending:
                self._waiting_on.setdefault(pending[0], []).append(decision)
                return
            self._carry_out(decision)
        elif isinstance(decision, dec.AllowRollout):
            host = self.hosts.get(decision.pipeline_id)
            if host is not None:
                host.allow(decision.adapter, decision.max_step)
        elif isinstance(decision, dec.Place):
            host = self.hosts.get(decision.pipeline_id)
            if host is not None:
                host.placed(decision)
        elif isinstance(decision, dec.Revoke):
            self.recorder.on_revoke(decision, self.clock())
            self.actuator.revoke(decision)
            host = self.hosts.get(decision.pipeline_id)
            if host is not None:
                host.revoked(decision)

    def _carry_out(self, decision: Moving) -> None:
        self.recorder.on_carry_out(decision, self.clock())
        self.actuator.carry_out(decision)

    # --- reports back -----------------------------------------------------------------------

    def applied(self, decision_id: int) -> None:
        decision = self._unsettled.pop(decision_id, None)
        if decision is None:
            return  # its pipeline went away, or it was settled already
        self.recorder.on_report(decision, True, self.clock())
        if self._defer is None:
            self._report_applied([decision])
            return
        if not self._applied:
            self._defer(self.flush_applied)
        self._applied.append(decision)

    def flush_applied(self) -> None:
        """Hand the applied reports gathered for this moment to the core, as one event."""
        gathered, self._applied = self._applied, []
        if gathered:
            self._report_applied(gathered)

    def _report_applied(self, decisions: list[Moving]) -> None:
        now = self.clock()
        if len(decisions) == 1:
            self.send(ev.DecisionApplied(now, decisions[0].decision_id))
        else:
            self.send(ev.DecisionsApplied(now, tuple(d.decision_id for d in decisions)))
        for decision in decisions:
            if isinstance(decision, dec.Grant):
                host = self.hosts.get(decision.pipeline_id)
                if host is not None:
                    host.granted(decision.cluster)
            self._release_waiting(decision.decision_id)

    def failed(self, decision_id: int, reason: str = "") -> None:
        decision = self._unsettled.pop(decision_id, None)
        if decision is None:
            return
        self._failed_ids.add(decision_id)
        self.recorder.on_report(decision, False, self.clock())
        self.send(ev.DecisionFailed(self.clock(), decision_id, reason))
        for waiting in self._waiting_on.pop(decision_id, []):
            self.failed(waiting.decision_id, "a required shrink failed")

    def _release_waiting(self, decision_id: int) -> None:
        for waiting in self._waiting_on.pop(decision_id, []):
            if waiting.decision_id not in self._unsettled:
                continue
            if any(i in self._failed_ids for i in waiting.requires):
                self.failed(waiting.decision_id, "a required shrink failed")
                continue
            pending = [i for i in waiting.requires if i in self._unsettled]
            if pending:
                self._waiting_on.setdefault(pending[0], []).append(waiting)
            else:
                self._carry_out(waiting)

    def _forget(self, pipeline_id: str) -> None:
        """A removed pipeline's decisions are void: the core ignores their reports. Others'
        that waited on them go ahead (its GPUs are free); none of its own is carried out, so
        every one of them is dropped before any waiting decision is released."""
        gone = [i for i, decision in self._unsettled.items() if decision.pipeline_id == pipeline_id]
        for decision_id in gone:
            del self._unsettled[decision_id]
        self.hosts.pop(pipeline_id, None)
        for decision_id in gone:
            self._release_waiting(decision_id)

    @property
    def num_unsettled(self) -> int:
        return len(self._unsettled)
