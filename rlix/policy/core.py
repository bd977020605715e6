"""The policy core: a sans-IO state machine that decides who holds which GPU.

Theory of operation
-------------------
A driver (the SimPy model or the Ray executor) owns time and the GPUs; the core owns the
decisions. The driver hands in one past-tense fact at a time (`Scheduler.handle(event)`), and
gets back the decisions of one *round*, in the order they must be carried out. Nothing in here
reads a clock, draws a random number, starts a thread or touches I/O, so a run is a pure
function of its event sequence and the simulator predicts exactly what the executor does.

Handling an event has three phases:

1. Validate. The event is checked against the state in full (unknown pipeline, request before
   admit, a second pending request, negative progress, `now` going backwards, ...). A bad event
   raises `EventError` before anything changes.
2. Apply. The fact updates the state: a release frees GPUs, progress updates demand, a report
   settles a two-phase decision (see `rlix.policy.ledger`), a lost GPU revokes its holder, a
   new weight version advances staleness pacing (`AllowRollout` up to version + k).
3. Round. The active policy runs one decision round over the whole state:
   a. the policy says which admitted pipelines may run now (all, or one at a time, ...);
   b. rollout ranks of pipelines that stopped rolling out are shrunk ("release"), or under rlix
      kept loaded while no one needs their GPUs (`rlix.policy.warm`);
   c. non-rollout requests are served by priority, then arrival (`rlix.policy.admission`):
      gang grants, preempting rollout ranks only when that makes the grant happen now, and
      reserving the GPUs of blocked requests so later, lower work cannot overtake them;
   d. rollout GPUs are split among the pipelines still rolling out (`rlix.policy.rollout`,
      or `rlix.policy.gap_ratio` for the RLix model). The rlix policy first prices loans of
      the homes of pipelines away between steps and reclaims those falling due
      (`rlix.policy.look_ahead`, from move times and absences the core measured itself), and
      loads the ranks of owners due back to roll out on their homes before they ask
      (`rlix.policy.wake_ahead`); it may ask to be woken at a time (`wake_at_s`), which drivers
      answer with a Tick. In a study judged by its makespan it weighs each job by its time
      left (`rlix.policy.finish`), and a job in training yields to those whose steps wait on
      their rollout (`rlix.policy.training_yields`).

Decisions that move GPUs count as done when emitted (so one GPU is never promised twice) and
are settled later by `DecisionApplied` / `DecisionFailed`. Ties always break by priority, then
the core's arrival number, then pipeline id, so a run is deterministic.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING

from rlix.policy import lifecycle
from rlix.policy.admission import Reservations, serve_requests
from rlix.policy.cluster import ClusterState
from rlix.policy.config import PolicyConfig
from rlix.policy.decisions import Decision
from rlix.policy.errors import EventError, SpecError
from rlix.policy.events import Event
from rlix.policy.ledger import Ledger
from rlix.policy.policies import Policy, get_policy
from rlix.policy.specs import Topology, is_number
from rlix.policy.state import PipelineState, RankStatus, Request
from rlix.policy.warm import may_stay_warm, requested_gpus

if TYPE_CHECKING:
    from rlix.policy.invariants import InvariantChecker
    from rlix.policy.split import Claim, Split


class Scheduler:
    """One GPU pool, many pipelines, one policy. Feed it events; carry out its decisions."""

    def __init__(
        self,
        topology: Topology,
        policy: str | Policy = "rlix",
        config: PolicyConfig | None = None,
        check_invariants: bool = False,
    ) -> None:
        if not isinstance(topology, Topology):
            raise SpecError("topology", topology, "must be a Topology(num_nodes, gpus_per_node)")
        topology.validate()
        self.topology = topology
        if not isinstance(policy, str | Policy):
            raise SpecError("policy", policy, "must be a policy name or a Policy")
        self.policy = get_policy(policy) if isinstance(policy, str) else policy
        self.config = PolicyConfig() if config is None else config
        if not isinstance(self.config, PolicyConfig):
            raise SpecError("config", config, "must be a PolicyConfig")
        self.config.validate()
        self.cluster = ClusterState(topology)
        self.pipelines: dict[str, PipelineState] = {}
        #: Pending non-rollout requests in service order (priority, arrival number, pipeline).
        self.queue: list[Request] = []
        self.ledger = Ledger(self)
        self.now = 0.0
        self.next_seq = 0
        self._admitted_order: tuple[tuple[int, int], tuple[PipelineState, ...], frozenset[str]] = (
            (-1, -1), (), frozenset())
        #: The rollout split of the last round: target GPUs and ideal (unrounded) GPUs.
        self.targets: dict[str, int] = {}
        self.ideal: dict[str, float] = {}
        #: The last split worked out, with what it was worked out from (rlix.policy.rollout).
        self.split_memo: tuple[tuple[int, tuple[Claim, ...]], Split] | None = None
        self.reservations = Reservations()
        self.runnable: frozenset[str] = frozenset()
        #: Pipelines away between steps (rlix.policy.look_ahead), kept by note_left/note_back.
        self.away: dict[str, PipelineState] = {}
        #: When the core wants to run a round even if no event comes (a loan falls due back,
        #: rlix.policy.look_ahead); inf: never. A driver sends a Tick then, or soon after.
        self.wake_at_s = math.inf
        self._checker: InvariantChecker | None = None
        if check_invariants:
            from rlix.policy.invariants import InvariantChecker

            self._checker = InvariantChecker(self)

    # --- the driver's interface -------------------------------------------------------------

    def handle(self, event: Event) -> list[Decision]:
        """Take one fact, run one decision round, return its decisions in execution order."""
        handler = lifecycle.HANDLERS.get(type(event))
        if handler is None:
            raise EventError("event", type(event).__name__, "unknown event type")
        if not is_number(event.now):
            raise EventError("now", event.now, "must be a finite number of seconds")
        if event.now < 0:  # before any event too, where "goes backwards" would name none
            raise EventError("now", event.now, "must be >= 0 (the core's clock starts at 0)")
        if event.now < self.now:
            raise EventError("now", event.now, f"goes backwards (last event was at {self.now})")
        previous_now, self.now = self.now, float(event.now)
        try:
            handler(self, event)  # validates in full before it changes anything
        except Exception:
            self.now = previous_now
            raise
        if self.policy.round_ready(self, event):
            self._round()
        decisions = self.ledger.take_output()
        if self._checker is not None:
            self._checker.after_round(event, decisions)
        return decisions

    def pipeline(self, pipeline_id: str) -> PipelineState:
        if not isinstance(pipeline_id, str):
            raise EventError("pipeline_id", pipeline_id, "must be a string")
        try:
            return self.pipelines[pipeline_id]
        except KeyError:
            raise EventError("pipeline_id", pipeline_id, "unknown pipeline") from None

    # --- helpers shared by the event handlers and the policies ----------------------------

    def admitted_in_order(self) -> tuple[PipelineState, ...]:
        """The admitted pipelines, oldest admission first. Kept between rounds: every admission
        draws a sequence number and every removal shrinks `pipelines`, so the order is
        recomputed only when one of those changed (a long queue's rounds sort it once)."""
        key = (self.next_seq, len(self.pipelines))
        if self._admitted_order[0] != key:
            order = sorted((p for p in self.pipelines.values() if p.admitted), key=lambda p: p.admitted_seq)
            self._admitted_order = (key, tuple(order), frozenset(p.pipeline_id for p in order))
        return self._admitted_order[1]

    def admitted_ids(self) -> frozenset[str]:
        """The ids of `admitted_in_order`, kept with it."""
        self.admitted_in_order()
        return self._admitted_order[2]

    def new_seq(self) -> int:
        seq = self.next_seq
        self.next_seq += 1
        return seq

    def enqueue(self, request: Request) -> None:
        self.pipelines[request.pipeline_id].pending[request.cluster] = request
        bisect.insort(self.queue, request, key=lambda r: r.order)

    def requeue(self, request: Request, retry_after_s: float) -> None:
        request.retry_after_s = retry_after_s
        request.hold_reason = ""
        self.enqueue(request)

    def rolling_pipelines(self) -> list[PipelineState]:
        """Pipelines rolling out that the policy lets run, in admission order."""
        rollers = [p for p in self.pipelines.values() if p.rolling and p.pipeline_id in self.runnable]
        rollers.sort(key=lambda p: p.admitted_seq)
        return rollers

    # --- the round --------------------------------------------------------------------------

    def _round(self) -> None:
        self.runnable = self.policy.runnable(self)
        self._release_idle_ranks()
        self.reservations = serve_requests(self, self.policy)
        self.policy.plan_rollout(self)

    def _release_idle_ranks(self) -> None:
        warm = self.policy.keeps_warm and self.config.keep_warm
        needed: frozenset[int] | None = None  # GPUs waiting requests map to, found once
        for pipeline in self.pipelines.values():
            if not pipeline.active or (pipeline.rolling and pipeline.pipeline_id in self.runnable):
                continue
            keep_warm = warm and pipeline.pipeline_id in self.runnable  # rlix.policy.warm
            if keep_warm and needed is None:
                needed = requested_gpus(self)
            for rank in list(pipeline.active.values()):
                active = rank.status is RankStatus.ACTIVE
                # A loaded rank, or one woken ahead of its pipeline's return (still loading),
                # stays warm if it may.
                if (
                    keep_warm and needed is not None and (active or rank.woken_ahead_id == rank.decision_id)
                    and may_stay_warm(self, pipeline, rank, needed)
                ):
                    continue
                if not active:
                    rank.release_when_applied = True
                elif rank.shrink_retry_after_s <= self.now:  # else: its last shrink failed
                    self.ledger.shrink(rank, "release")
