"""A model of RLix's "gap ratio" rollout planner (shared/REFERENCE.md), to measure rlix against.

It must decide what RLix decides, weak points included: targets are not normalised (they may
sum past the budget), every pipeline keeps a one-bundle floor even at zero demand, blocked
requests shrink rollout for nothing and reserve nothing (`GapRatioPolicy` in
`rlix.policy.policies`), and a cycle runs on every event, progress ticks included. What it
models, in RLix's terms (the comments marked "RLix:" state RLix's behaviour in plain words):

- The cycle (`CycleTrigger`). RLix plans a cycle, carries out all its shrinks, then all its
  expansions, and only then commits, so a cycle never sees a rank that is still loading or
  unloading. The model emits a round's shrinks before its expansions and runs no round while
  a rank move of an earlier one is in flight; events that arrive meanwhile are applied and
  wait for the next round, as they wait for RLix's lock.
- Demand R and total T per pipeline, the pending boost, who is skipped: `_claim`.
- Targets and the one-activation-at-a-time loop: `plan_gap_ratio`, `_CyclePlan.activate_one`.
- Donors, the per-donor shrink budget and candidate scoring: `_CyclePlan._best_candidate` and
  `_CyclePlan._victims`. The model finds a candidate's victims from the owners of its GPUs
  rather than by scanning every donor's ranks as RLix does (the same victims, since each GPU
  has one owner), so it plans faster than RLix; RLix's own cycle times, on synthetic states
  (REFERENCE.md) and on the studies' states (docs/performance.md), are charged to neither.

Checked against one cycle of RLix's own scheduler, training requests that preempt rollout
included, on random situations and on the model's states in the studies
(bench/rlix_differential.py); the hand-checked cases are in tests/policy/test_gap_ratio.py.
Not modelled: RLix shuts down when a cycle exceeds 1,000 activations or 10,000 iterations; a
failed decision (RLix would shut down) leaves its rank backing off, which the model respects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlix.policy.decisions import Expand, Shrink
from rlix.policy.events import DecisionApplied, DecisionsApplied, Event
from rlix.policy.state import Holder, PipelineState, Rank, RankStatus

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler


def rank_moves_in_flight(sched: Scheduler) -> bool:
    """Whether an Expand or Shrink is still being carried out: RLix's cycle is not over yet."""
    return any(isinstance(decision, Expand | Shrink) for decision, _ in sched.ledger.inflight.values())


class CycleTrigger:
    """When the model runs a round. RLix: a cycle runs when something wakes it (a request, a
    release, a progress report, a registration; here any event but a report that a decision
    was carried out, which RLix does inside the cycle), once the cycle before it has carried
    out all its resizes. Events that come in meanwhile wake the next cycle. A `Tick` stands for
    RLix's 1 s poll and always wakes it (RLix's poll runs a cycle only when no request waits
    and some rollout allocation is suspended with demand or the split is 10 points off: not
    modelled), and so does a `DecisionFailed` (RLix shuts down instead)."""

    def __init__(self) -> None:
        self.woken = False

    def ready(self, sched: Scheduler, event: Event) -> bool:
        if not isinstance(event, DecisionApplied | DecisionsApplied):
            self.woken = True
        if not self.woken or rank_moves_in_flight(sched):
            return False
        self.woken = False
        return True


@dataclass(slots=True, eq=False)
class _Claim:
    """One pipeline in one cycle, as RLix's planner sees it."""

    pipeline: PipelineState
    remaining: float  # R, with the pending boost
    fraction_left: float  # R / T, which ranks donors when candidates are scored
    active: list[Rank]  # RLix's order: by dp_rank, then ranks activated this cycle
    ratio: float = 0.0
    target: int = 0
    gap: float = 0.0
    shrink_budget: int = 0

    @property
    def num_active_gpus(self) -> int:
        return len(self.active) * self.pipeline.tp


def _claim(pipeline: PipelineState) -> _Claim | None:
    """RLix: R = remaining work summed over the progress streams and T = their targets; with no
    report yet, a pending request's estimate (an integer trajectory count: R = T = estimate,
    skipped if below 1); with neither, the pipeline is skipped, so its active ranks count in no
    budget and are never donated. The model's T is the request's estimate (at least R).
    RLix: a pending rollout request adds T to R, so a pipeline that has not started still gets
    weight. The request is answered at its pipeline's first granted rank: a pipeline preempted to
    zero later is not boosted again (and, if it has no report, skipped)."""
    pending = pipeline.rollout_request_pending
    if pipeline.remaining:
        remaining = sum(pipeline.remaining.values())
        total = max(pipeline.estimate, remaining)
    elif pending and pipeline.estimate >= 1:
        remaining = total = float(math.floor(pipeline.estimate))
    else:
        return None
    if pending:
        remaining += total
    active = sorted(pipeline.active.values(), key=lambda r: r.dp_rank)
    return _Claim(pipeline, remaining, remaining / total if total > 0 else 0.0, active)


def _round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


def plan_gap_ratio(sched: Scheduler) -> None:
    rollers = sched.rolling_pipelines()
    # RLix walks its pipelines in registration order (it matters only for ties).
    rollers.sort(key=lambda p: p.registered_seq)
    claims = [c for c in map(_claim, rollers) if c is not None]
    # RLix: budget B = idle GPUs (cluster-wide, after this cycle's earlier shrinks and grants)
    # + the GPUs of every planned pipeline's active ranks.
    budget = sched.cluster.num_free + sum(c.num_active_gpus for c in claims)
    total_weight = sum(c.remaining * c.pipeline.tp for c in claims)
    for c in claims:
        # RLix: ratio = R*tp / sum(R*tp); target = max(round_half_up(ratio*B/tp)*tp, tp). Not
        # normalised (targets may sum past B); the floor holds even at zero demand.
        tp = c.pipeline.tp
        if total_weight > 0:
            c.ratio = c.remaining * tp / total_weight
            c.target = max(_round_half_up(c.ratio * budget / tp) * tp, tp)
    sched.targets = {c.pipeline.pipeline_id: c.target for c in claims}
    sched.ideal = {c.pipeline.pipeline_id: c.ratio * budget for c in claims}
    if budget > 0 and claims:
        plan = _CyclePlan(sched, claims, budget)
        while plan.activate_one():
            pass
        plan.emit()
    for pipeline in rollers:
        if pipeline.num_active_gpus:
            pipeline.rollout_request_pending = False  # answered at the end of this cycle


class _CyclePlan:
    """One cycle's planning on a private copy of GPU ownership; decisions are emitted at the
    end, shrinks first (RLix carries out all shrinks before any expansion)."""

    def __init__(self, sched: Scheduler, claims: list[_Claim], budget: int) -> None:
        self.sched = sched
        self.claims = claims
        self.by_id = {c.pipeline.pipeline_id: c for c in claims}
        self.budget = budget
        self.owner: list[Holder | None] = list(sched.cluster.owner)
        # RLix: a rank shrunk or expanded in a cycle is not touched again in it, including the
        # ranks the cycle's preemptions and releases shrank before the split.
        self.touched: set[tuple[str, int]] = {
            (d.pipeline_id, d.dp_rank) for d in sched.ledger.out if isinstance(d, Shrink)
        }
        self.shrinks: list[Rank] = []
        self.expands: list[Rank] = []

    def activate_one(self) -> bool:
        """RLix: one activation per iteration, gaps recomputed after each. gap = ratio -
        active/B. Acceptors: gap > 0 and below target, by gap/ratio, then gap (both descending),
        then pipeline id; the first acceptor that can take a rank takes one."""
        budget = self.budget
        for c in self.claims:
            c.gap = c.ratio - c.num_active_gpus / budget
            # RLix: a donor gives up at most (active ranks - max(1, target ranks)) ranks per
            # cycle; as its active ranks fall, so does what it may still give.
            floor = max(1, c.target // c.pipeline.tp) if c.target > 0 else 0
            c.shrink_budget = max(0, len(c.active) - floor)
        acceptors = [c for c in self.claims if c.gap > 0 and c.num_active_gpus < c.target]
        acceptors.sort(key=lambda c: (-c.gap / c.ratio, -c.gap, c.pipeline.pipeline_id))
        for acceptor in acceptors:
            found = self._best_candidate(acceptor)
            if found is not None:
                self._commit(acceptor, *found)
                return True
        return False

    def _best_candidate(self, acceptor: _Claim) -> tuple[Rank, list[Rank]] | None:
        """RLix: candidates are the acceptor's inactive, untouched ranks whose bundle avoids
        non-rollout GPUs. A candidate needing no donor wins; among the others, compare the
        tuple of the victims' R/T, negated, taken from the smallest R/T up: the candidate whose
        most nearly finished victim has the most work left wins, and at equal leading values
        the one with fewer victims. Then the lowest dp_rank."""
        pipeline = acceptor.pipeline
        now = self.sched.now
        best: tuple[tuple[bool, tuple[float, ...], int], Rank, list[Rank]] | None = None
        for rank in pipeline.ranks:
            if rank.status is not RankStatus.INACTIVE or rank.retry_after_s > now:
                continue
            if (pipeline.pipeline_id, rank.dp_rank) in self.touched:
                continue
            victims = self._victims(rank)
            if victims is None:
                continue
            left = sorted(self.by_id[v.pipeline_id].fraction_left for v in victims)
            score = (bool(victims), tuple(-x for x in left), rank.dp_rank)
            if best is None or score < best[0]:
                best = (score, rank, victims)
        return None if best is None else (best[1], best[2])

    def _victims(self, rank: Rank) -> list[Rank] | None:
        """The active ranks to shrink so that `rank`'s bundle is free, or None if it cannot be.
        RLix: each GPU not idle must be under an active, untouched rank of a donor (gap < 0),
        and no donor may lose more ranks to this one candidate than its shrink budget."""
        owner = self.owner
        offline = self.sched.cluster.offline
        now = self.sched.now
        if any(owner[g] is not None and type(owner[g]) is not Rank for g in rank.gpus):
            return None  # a non-rollout GPU: not a candidate at all
        victims: dict[int, Rank] = {}
        for gpu in rank.gpus:
            holder = owner[gpu]
            if holder is None:
                if gpu in offline:
                    return None
                continue
            assert type(holder) is Rank
            donor = self.by_id.get(holder.pipeline_id)
            if (
                donor is None
                or donor.gap >= 0
                or holder.status is not RankStatus.ACTIVE
                or (holder.pipeline_id, holder.dp_rank) in self.touched
                or holder.shrink_retry_after_s > now  # its last shrink failed (RLix: no failures)
            ):
                return None
            victims[id(holder)] = holder
        taken: dict[str, int] = {}
        for victim in victims.values():
            taken[victim.pipeline_id] = taken.get(victim.pipeline_id, 0) + 1
        if any(n > self.by_id[pid].shrink_budget for pid, n in taken.items()):
            return None
        return list(victims.values())

    def _commit(self, acceptor: _Claim, rank: Rank, victims: list[Rank]) -> None:
        owner = self.owner
        for victim in victims:
            self.by_id[victim.pipeline_id].active.remove(victim)
            for gpu in victim.gpus:
                owner[gpu] = None  # what the rank does not need stays idle for later candidates
            self.touched.add((victim.pipeline_id, victim.dp_rank))
            self.shrinks.append(victim)
        for gpu in rank.gpus:
            owner[gpu] = rank
        acceptor.active.append(rank)
        self.touched.add((rank.pipeline_id, rank.dp_rank))
        self.expands.append(rank)

    def emit(self) -> None:
        ledger = self.sched.ledger
        for victim in self.shrinks:
            ledger.shrink(victim, "rebalance")
        for rank in self.expands:
            ledger.expand(rank)
