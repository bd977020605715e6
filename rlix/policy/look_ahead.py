"""Look-ahead on loans: what the core learns of each pipeline's rhythm, and the rules built on it.

Between two steps a pipeline often holds nothing for a while: its training ended and it
publishes the new weights (a sync that takes about the same time every step), or it waits for
its staleness bound. Its home's GPUs are free then, and the rlix split lends them to pipelines
still rolling out. A loan has a price: the borrower loads weights before it does any work, and
it must offload before the owner can have the GPUs back. If it still holds them when the owner
returns, the owner waits for that offload, and the owner of a home is often the job on the
critical path (a 7B on-policy job spends ~1 s a step so in math-rlvr). Nothing about this needs
a new event: the core already sees when each pipeline goes away and comes back, and when each
Expand and Shrink it emitted was applied.

What is measured, per pipeline (`PipelineState`):

- `load_s` and `offload_s`: emitted-to-applied time of its Expands (that wait for nothing) and
  Shrinks, a running mean (each new figure weighs one half), nan until measured (a move not
  measured yet counts as free: `move_s`);
- `last_away_s`: how long its last absence lasted, from the release that left it holding and
  requesting nothing to its next request. Its expected return is `away_since_s + last_away_s`.

The rules (`PolicyConfig.look_ahead`, rlix only), for the home of an away pipeline expected back
at `r` (an owner late by more than its last absence is no longer expected: its home is lent as
any free GPU):

1. No loan that does not pay. A free bundle sharing a GPU with that home is not lent to a
   pipeline B with `r - now <= (1 + loan_payback) * (load_s(B) + offload_s(B))`: the loan would
   not work at least `loan_payback` times as long as it spends moving.
2. Reclaim on time. A rank of another pipeline B on that home is shrunk ("reclaim") once
   `now >= r - offload_s(B)`, so the owner finds its home free when it returns. The core asks
   its driver to wake it then (`Scheduler.wake_at_s`), since no other event may come.

An owner that returns earlier than expected waits for the offload as it would without these
rules; one that returns later leaves its home idle for at most its last absence past `r`. An
owner woken ahead of its return (rlix.policy.wake_ahead) needs its home its own load time
earlier: for it, `r` is its expected return less that time.

3. A loan ends when its owner wants it back. An owner short of its share by a bundle (past
   the margin) that finds no donor elsewhere takes a bundle of its own home from a pipeline
   above its share, even one given ranks by a rebalance within the interval, and even if the
   owner itself gave ranks away by one: that interval keeps the split from undoing itself
   for small gains, and a home's owner taking it back undoes nothing. (An owner that gave
   ranks away within the interval takes none from donors elsewhere.) The owner's bundle and
   the borrowers' ranks need not match: a TP-2 owner takes two TP-1 ranks. agentic-4x32 (16
   seeds): 41.6 -> 42.0 steps/h; math-rlvr, whose 7B on-policy job comes back from its
   publish to a home the 1.5B jobs borrowed, 198.6 -> 199.0 (8 seeds 199.1 -> 199.6, static
   199.5).

4. No loan the owner's training cuts before it pays. A rolling owner trains at a steady
   rhythm: the core notes when each of its steps' training began (its first request after a
   rollout, `gang_at_s`) and how long after the one before (`gang_period_s`), and expects the
   next at `t = gang_at_s + gang_period_s` (one more than half a period late is no longer
   expected). A free bundle of that owner's own home is not lent to, nor moved by a
   rebalance to, a pipeline B with `t - now < (1 + loan_payback) * (load_s(B) + offload_s(B))`:
   the training gang would preempt the loan, its in-flight trajectories computed again,
   before it paid for its moves. Only homes no other home covers: a stacked home's GPUs are
   several jobs' and no one job's rhythm says when they are needed.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rlix.policy.due_bits import DueBits
from rlix.policy.state import RANK_ACTIVE, PipelineState, Rank

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler


def measure_move(sched: Scheduler, rank: Rank, loaded: bool) -> None:
    """A decision on `rank` was applied: fold its emitted-to-applied time into its pipeline's
    load (an Expand) or offload (a Shrink) time."""
    emitted = rank.emitted_s
    if emitted != emitted:  # nan: an Expand that waited for a Shrink; not its own time
        return
    rank.emitted_s = math.nan
    pipeline = sched.pipelines.get(rank.pipeline_id)
    if pipeline is None:
        return
    took = sched.now - emitted
    if loaded:
        pipeline.load_s = took if pipeline.load_s != pipeline.load_s else 0.5 * (pipeline.load_s + took)
    else:
        pipeline.offload_s = took if pipeline.offload_s != pipeline.offload_s else 0.5 * (pipeline.offload_s + took)


def move_s(seconds: float) -> float:
    """A measured move time, or 0 for one not measured yet."""
    return 0.0 if seconds != seconds else seconds


def wakes_ahead(sched: Scheduler, owner: PipelineState) -> bool:
    """Whether `owner`, away, is woken ahead of its return (rlix.policy.wake_ahead)."""
    config = sched.config
    return config.wake_ahead and config.keep_warm and owner.returns_rolling


def lead_s(sched: Scheduler, owner: PipelineState) -> float:
    """How long before its expected return an away owner's home must be free for it: its own
    load time when it is woken ahead, else nothing."""
    return move_s(owner.load_s) if wakes_ahead(sched, owner) else 0.0


def note_left(sched: Scheduler, pipeline: PipelineState) -> None:
    """After a release or a withdrawal: the pipeline is away if it now holds, requests and
    rolls out nothing."""
    if not (pipeline.holdings or pipeline.pending or pipeline.rolling) and pipeline.away_since_s != pipeline.away_since_s:
        pipeline.away_since_s = sched.now
        sched.away[pipeline.pipeline_id] = pipeline


def note_init_done(pipeline: PipelineState) -> None:
    """An init hold was released: until an absence is measured, the pipeline is expected back
    at once (its next cluster's init, or its first rollout, follows), so its home is not lent
    in the instant between (rule 1) only for its own rollout to take it back once loaded. Its
    first absence between steps is then expected as short: an on-policy job's ranks are woken
    at once when its first training ends (rlix.policy.wake_ahead), its home kept from loans,
    and from then on its absences are measured."""
    if pipeline.last_away_s != pipeline.last_away_s:
        pipeline.last_away_s = 0.0


def note_back(sched: Scheduler, pipeline: PipelineState, rolling: bool = False) -> None:
    """A request (`rolling`: a rollout's): an absence, if any, ends and its length is the next
    expectation."""
    since = pipeline.away_since_s
    if since == since:
        pipeline.last_away_s = sched.now - since
        pipeline.returns_rolling = rolling
        pipeline.away_since_s = math.nan
        del sched.away[pipeline.pipeline_id]


def note_training(sched: Scheduler, pipeline: PipelineState) -> None:
    """A request of a training stage: the first after a rollout starts a step's training,
    and the time since the last one is the period expected next (rule 4)."""
    if not pipeline.gang_armed:
        return
    pipeline.gang_armed = False
    last = pipeline.gang_at_s
    if last == last:
        pipeline.gang_period_s = sched.now - last
    pipeline.gang_at_s = sched.now


def note_tail(sched: Scheduler, pipeline: PipelineState) -> None:
    """A progress report: the rollout's tail begins at the first one with nothing queued."""
    if pipeline.in_tail and pipeline.tail_since_s != pipeline.tail_since_s:
        pipeline.tail_since_s = sched.now


def note_rollout_end(sched: Scheduler, pipeline: PipelineState) -> None:
    """A rollout ended: how long its tail lasted joins the running mean (each new one weighs
    half, as the move times)."""
    since = pipeline.tail_since_s
    if since == since:
        took = sched.now - since
        last = pipeline.tail_s
        pipeline.tail_s = took if last != last else (last + took) / 2
    pipeline.tail_since_s = math.nan


def expected_training_s(sched: Scheduler, pipeline: PipelineState) -> float | None:
    """When a rolling pipeline's next training is expected to begin, or None (no period
    measured yet, or late by more than half a period)."""
    period = pipeline.gang_period_s
    if period != period:
        return None
    due = pipeline.gang_at_s + period
    return due if sched.now <= due + 0.5 * period else None


def expected_return_s(sched: Scheduler, pipeline: PipelineState) -> float | None:
    """When an away pipeline is expected back, or None (not away, no absence measured yet, or
    late by more than its last absence)."""
    since, usual = pipeline.away_since_s, pipeline.last_away_s
    if since != since or usual != usual:
        return None
    back = since + usual
    return back if sched.now <= back + usual else None


def own_home(sched: Scheduler, pipeline: PipelineState) -> tuple[tuple[int, ...], int]:
    """The GPUs of the pipeline's home that no other pipeline's home covers (a home shared
    with others is not a promise anyone can keep), and the bits of every slot sharing a GPU
    with them; cached while the slots and the homes stay as they are."""
    cluster = sched.cluster
    key = (len(cluster.slot_of_bit), cluster.homes_version)
    if pipeline.own_home_key != key:
        count = cluster.home_count
        gpus = tuple(g for g in pipeline.spec.home if count[g] == 1)
        # One pass over the slots touching those GPUs, not over every rank of the pipeline: a
        # bundle wholly on them is among those slots, and a cold round at 1,024 GPUs fills
        # this cache for pipelines of 500 ranks.
        mine, bits, slots = set(gpus), 0, 0
        slot_mask, slot_gpus, rank_by_slot = cluster.slot_mask, cluster.slot_gpus, pipeline.rank_by_slot
        for gpu in gpus:
            for slot in cluster.slots_by_gpu[gpu]:
                mask = slot_mask[slot]
                if bits & mask:
                    continue
                bits |= mask
                if slot in rank_by_slot and mine.issuperset(slot_gpus[slot]):
                    slots |= mask
        pipeline.own_home_slots = slots
        pipeline.own_home, pipeline.own_home_key = (gpus, bits), key
    return pipeline.own_home


def own_home_slots(sched: Scheduler, pipeline: PipelineState) -> int:
    """The bits of the pipeline's own bundles that lie wholly on its own home (rule 3),
    cached with `own_home`."""
    own_home(sched, pipeline)
    return pipeline.own_home_slots


def _registered(pipeline: PipelineState) -> int:
    return pipeline.registered_seq


class Loans:
    """The homes of away pipelines expected back, and of rolling ones whose training is due,
    for one round."""

    def __init__(self, sched: Scheduler, rollers: list[PipelineState]) -> None:
        self.sched = sched
        self.payback = sched.config.loan_payback
        #: (when its home is due free, slot bits and GPUs of its own home, owner) of each away
        #: pipeline that is expected back and has a home of its own. Due free at its expected
        #: return, or its own load time before when it is woken ahead (rlix.policy.wake_ahead).
        self.owners: list[tuple[float, int, tuple[int, ...], PipelineState]] = []
        self._rollers = rollers
        self._trainers: list[tuple[float, int, PipelineState]] | None = None
        self._due: tuple[DueBits, DueBits] | None = None
        self._blocked_for_all: int | None = None
        self._rolling: frozenset[str] | None = None
        if not sched.config.look_ahead:
            self._trainers = []
            return
        runnable = sched.runnable
        away = sched.away.values()
        # Registration order, as the pipelines are visited everywhere else: reclaims keep one
        # order whatever order the owners left in.
        for pipeline in sorted(away, key=_registered) if len(sched.away) > 1 else away:
            if pipeline.pipeline_id not in runnable:
                continue
            back = expected_return_s(sched, pipeline)
            if back is not None and pipeline.spec.home:
                gpus, bits = own_home(sched, pipeline)
                if gpus:
                    self.owners.append((back - lead_s(sched, pipeline), bits, gpus, pipeline))

    @property
    def trainers(self) -> list[tuple[float, int, PipelineState]]:
        """(expected start of its training, slot bits of its own home, owner) of each rolling
        pipeline with a home of its own and a measured training period (rule 4). Found when
        first asked: most rounds on a large pool lend nothing and never ask."""
        if self._trainers is None:
            sched = self.sched
            self._trainers = []
            for pipeline in self._rollers:
                due = expected_training_s(sched, pipeline) if pipeline.spec.home else None
                if due is not None:
                    _gpus, bits = own_home(sched, pipeline)
                    if bits:
                        self._trainers.append((due, bits, pipeline))
        return self._trainers

    def _due_tables(self) -> tuple[DueBits, DueBits]:
        """The owners' homes by when they are due back, and the trainers' by when they train:
        asked for every roller of the round, so sorted once (rlix.policy.due_bits)."""
        if self._due is None:
            self._due = (
                DueBits([(back, home, owner.pipeline_id) for back, home, _gpus, owner in self.owners], inclusive=True),
                DueBits([(due, home, owner.pipeline_id) for due, home, owner in self.trainers], inclusive=False),
            )
        return self._due

    def blocked_bits(self, borrower: PipelineState) -> int:
        """Slots `borrower` may not be lent this round: on homes whose owners are back, or
        begin training, before a loan would pay (rules 1 and 4)."""
        horizon = self.sched.now + (1.0 + self.payback) * (move_s(borrower.load_s) + move_s(borrower.offload_s))
        back_by, training_by = self._due_tables()
        pid = borrower.pipeline_id
        return back_by.upto(horizon, pid) | training_by.upto(horizon, pid)

    def blocked_for_every_roller(self) -> int:
        """Slots no roller of the round may be lent: the homes of owners not rolling out, due
        back by the earliest horizon of any roller (rule 1). Each roller's `blocked_bits`
        holds them (its horizon is no earlier, and none of those homes is its own), so where a
        roller's free candidates all lie in them it has nothing to be lent, and its own
        figure need not be worked out: on a pool of hundreds of jobs, GPUs kept for owners
        about to return are free round after round, and every roller is asked."""
        if self._blocked_for_all is None:
            self._blocked_for_all = self._work_out_blocked_for_all()
        return self._blocked_for_all

    def _work_out_blocked_for_all(self) -> int:
        rollers = self._rollers
        if not self.owners or not rollers:
            return 0
        # As blocked_bits works each one out; never nan (move_s makes an unmeasured time 0, the
        # payback is a finite number), so the earliest is a roller's own.
        factor = 1.0 + self.payback
        horizon = self.sched.now + min(factor * (move_s(p.load_s) + move_s(p.offload_s)) for p in rollers)
        rolling = self._rolling_ids()
        bits = 0
        for back, home, _gpus, owner in self.owners:
            # Due at the horizon counts, as in rule 1; an owner due at nan is never due.
            if back <= horizon and owner.pipeline_id not in rolling:
                bits |= home
        return bits

    def rolls(self, pipeline_id: str) -> bool:
        """Whether the pipeline is one of the round's rollers."""
        return pipeline_id in self._rolling_ids()

    def _rolling_ids(self) -> frozenset[str]:
        if self._rolling is None:
            self._rolling = frozenset(p.pipeline_id for p in self._rollers)
        return self._rolling

    def reclaiming_bits(self, borrower: PipelineState) -> int:
        """Slots of homes whose loans to `borrower` rule 2 reclaims now (a subset of its
        blocked bits): a loan made there this round would be shrunk as soon as it had loaded."""
        back_by, _training_by = self._due_tables()
        return back_by.upto(self.sched.now + move_s(borrower.offload_s), borrower.pipeline_id)

    def reclaim(self) -> float:
        """Shrink loans due back (rule 2); returns when the next one falls due (inf: none)."""
        sched = self.sched
        now = sched.now
        owner_of = sched.cluster.owner
        next_due = math.inf
        for back, _bits, gpus, owner in self.owners:  # back: when the home is due free
            seen: set[Rank] = set()
            for gpu in gpus:
                rank = owner_of[gpu]
                if type(rank) is not Rank or rank.pipeline_id == owner.pipeline_id or rank in seen:
                    continue
                seen.add(rank)
                borrower = sched.pipelines[rank.pipeline_id]
                due = back - move_s(borrower.offload_s)
                if due > now:
                    next_due = min(next_due, due)
                elif rank.status is RANK_ACTIVE and rank.shrink_retry_after_s <= now:
                    sched.ledger.shrink(rank, "reclaim")
        return next_due
