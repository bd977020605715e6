"""Moves between pipelines: taking a rank's bundle from donors above their targets.

A donor is a rolling pipeline above its split target (`rlix.policy.placement.is_donor`). Donors
are taken in order of rollout work left, most first: a nearly finished pipeline is about to
free its GPUs anyway, and preempting it would waste almost-complete trajectories. One
`Donors` serves a whole round of moves (`rlix.policy.rollout`): no move changes a demand, so
the order is sorted once, and a donor brought down to its target leaves the list.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlix.policy.look_ahead import own_home, own_home_slots
from rlix.policy.placement import Move, RoundPlanner, is_donor, may_receive
from rlix.policy.state import PipelineState, Rank

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler


def _most_work_first(pipeline: PipelineState) -> tuple[float, int]:
    """Donor order: the most rollout work left first, then admission order."""
    return (-pipeline.demand, pipeline.admitted_seq)


class Donors:
    """Pipelines above their target, most rollout work left first; built on first use."""

    def __init__(self, sched: Scheduler, rollers: list[PipelineState]) -> None:
        self.sched = sched
        self.rollers = rollers
        self.donors: list[PipelineState] | None = None
        self._by_work: list[PipelineState] | None = None

    def by_work(self) -> list[PipelineState]:
        """The rollers, most work left first: no move changes a demand, so one sort serves
        the whole pass, and a filter of it is in donor order (the key is unique)."""
        if self._by_work is None:
            self._by_work = sorted(self.rollers, key=_most_work_first)
        return self._by_work

    def move_one_to(self, pipeline: PipelineState, planner: RoundPlanner) -> bool:
        """Shrink ranks of donors (or, for a first bundle, relocate ranks of others) to expand
        one rank of `pipeline`; whether any. A pipeline that gave ranks away by a rebalance
        within the interval takes none from donors (`may_receive`), only its own home back."""
        sched = self.sched
        if self.donors is None:
            self.donors = [d for d in self.by_work() if is_donor(sched, d)]
        if pipeline.num_active_gpus:  # the hot path of a rebalance: one call per rank moved
            found = planner.donor_fit(pipeline, self.donors) if may_receive(sched, pipeline) else None
            if found is None and sched.config.look_ahead:
                found = self._home_back(pipeline, planner)
            if found is None:
                return False
            self._take_from_donors(pipeline, found[0], found[1])
            return True
        planner.any_donor = True
        try:
            above = [d for d in self.by_work() if is_donor(sched, d, any_donor=True)]
            found = planner.donor_fit(pipeline, above)
            move = None if found is not None else planner.relocation_fit(pipeline, {p.pipeline_id for p in self.rollers})
        finally:
            planner.any_donor = False
        if found is None and move is None:
            rank = planner.kept_back_fit(pipeline)
            if rank is None:
                return False
            sched.ledger.expand(rank)
            return True
        if found is None and move is not None and not move[2]:
            found = (move[0], move[1])  # relocation needing no replacement: donors' ranks
        if found is not None:
            self._take_from_donors(pipeline, found[0], found[1])
        else:
            assert move is not None
            self._relocate(pipeline, move)
        return True

    def _home_back(self, pipeline: PipelineState, planner: RoundPlanner) -> tuple[Rank, list[Rank]] | None:
        """A bundle on the pipeline's own home held by pipelines above their targets, those given
        ranks by a recent rebalance too: a home's owner taking it back ends a loan, it does not
        reverse the split (rlix.policy.look_ahead, rule 3)."""
        only = own_home_slots(self.sched, pipeline)
        if not only:
            return None
        gpus, near = own_home(self.sched, pipeline)
        # Only ranks holding GPUs of the own home can be taken, so only their pipelines are
        # donors here; most calls find none (asked once per rank short, every round, on pools
        # of hundreds of jobs). Filtering keeps the donors' order, so the answer is the same.
        owner_of = self.sched.cluster.owner
        holders = {h.pipeline_id for h in map(owner_of.__getitem__, gpus) if type(h) is Rank}
        holders.discard(pipeline.pipeline_id)
        if not holders:
            return None
        targets = self.sched.targets
        above = [
            d for d in self.by_work()
            if d.pipeline_id in holders and d.num_active_gpus > targets.get(d.pipeline_id, 0)
        ]
        if not above:
            return None
        planner.any_donor = True
        try:
            return planner.donor_fit(pipeline, above, only, near)
        finally:
            planner.any_donor = False

    def _take_from_donors(self, pipeline: PipelineState, rank: Rank, victims: list[Rank]) -> None:
        """Shrink `victims`, ranks of donors within their excess, and expand `rank`."""
        sched = self.sched
        ledger = sched.ledger
        now = sched.now
        donors = self.donors
        assert donors is not None
        if len(victims) == 1 and victims[0].slot == rank.slot:  # commonest: one rank's bundle
            victim = victims[0]
            ledger.hand_over(victim, rank)
            donor = sched.pipelines[victim.pipeline_id]
            donor.last_rebalanced_out_s = pipeline.last_rebalanced_in_s = now
            if donor in donors and not is_donor(sched, donor):
                donors.remove(donor)
            return
        for victim in victims:
            ledger.shrink(victim, "rebalance")
            sched.pipelines[victim.pipeline_id].last_rebalanced_out_s = now
        ledger.expand(rank)
        pipeline.last_rebalanced_in_s = now
        for victim in victims:  # only the victims' pipelines can have stopped being donors
            donor = sched.pipelines[victim.pipeline_id]
            if donor in donors and not is_donor(sched, donor):
                donors.remove(donor)

    def _relocate(self, pipeline: PipelineState, move: Move) -> None:
        """Carry out a first bundle's relocation (see `RoundPlanner.relocation_fit`)."""
        sched = self.sched
        ledger = sched.ledger
        rank, victims, replacements = move
        donors = self.donors
        assert donors is not None
        net: dict[str, int] = {}
        for victim in victims + [v for _, displaced in replacements for v in displaced]:
            ledger.shrink(victim, "rebalance")
            net[victim.pipeline_id] = net.get(victim.pipeline_id, 0) - len(victim.gpus)
        ledger.expand(rank)
        pipeline.last_rebalanced_in_s = sched.now
        for replacement, _ in replacements:
            ledger.expand(replacement)
            net[replacement.pipeline_id] += len(replacement.gpus)
        for pid, change in net.items():
            affected = sched.pipelines[pid]
            if change < 0:
                affected.last_rebalanced_out_s = sched.now
            if affected in donors and not is_donor(sched, affected):
                donors.remove(affected)
