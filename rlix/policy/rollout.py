"""Planning rollout ranks: expansions onto free GPUs and moves between pipelines.

The `rlix` policy computes split targets (`rlix.policy.split`) over the GPUs rollout may use
this round, then:

1. Moves: while some pipeline is short of its target by a whole bundle, give it one rank, the
   most under-served pipeline first. A free bundle (no donor) is preferred; otherwise a bundle
   held by active ranks of pipelines above their targets, taken from the donor with the most
   rollout work left (a nearly finished pipeline is about to free its GPUs anyway, and
   preempting it would waste almost-complete trajectories). A rank touched in a round is not
   touched again in it.
2. Fill: GPUs still free are lent to rolling pipelines that can use them, so nothing idles
   that could work; a later move takes them back if a target calls for it. A pipeline that
   was lent GPUs may now be above target, so moves and fill repeat until nothing is lent.

Finding a free bundle is a few operations on bitsets (free slots and a pipeline's slots as
Python ints: linear in the number of bundles, but at machine-word speed in C), and finding a
donor rank looks only at donors' active ranks, so a round costs about the number of moves, not
GPUs times pipelines.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from rlix.policy.split import Claim, split_rollout
from rlix.policy.state import PipelineState, Rank, RankStatus

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler


def rollout_budget(sched: Scheduler, rollers: list[PipelineState]) -> int:
    """GPUs in the rollers' mappings that are free or held by rollout ranks, less reserved ones
    (a reserved GPU does not count even under a rank: the request it waits for will take it).

    Counted from the few exclusions (non-rollout holdings, lost and reserved GPUs) rather than
    GPU by GPU, so it costs the size of those, not of the cluster."""
    if not rollers:
        return 0
    union = _rollout_union(sched, rollers)
    excluded = {g for g in sched.reservations.reserved_for if g in union}
    excluded.update(g for g in sched.cluster.offline if g in union)
    for pipeline in sched.pipelines.values():
        for hold in pipeline.holdings.values():
            excluded.update(g for g in hold.gpus if g in union)
    return len(union) - len(excluded)


def _rollout_union(sched: Scheduler, rollers: list[PipelineState]) -> frozenset[int]:
    """Every GPU some roller's rollout mapping covers; cached while the set of rollers holds
    (identified by registration numbers, which are never reused)."""
    key = frozenset(p.registered_seq for p in rollers)
    cached = sched.cluster.union_cache
    if cached is not None and cached[0] == key:
        return cached[1]
    union = frozenset(g for pipeline in rollers for g in pipeline.spec.rollout.mapping)
    sched.cluster.union_cache = (key, union)
    return union


def compute_split(sched: Scheduler, rollers: list[PipelineState]) -> None:
    claims = [
        Claim(
            pipeline_id=p.pipeline_id,
            demand=p.demand,
            tp=p.tp,
            weight=p.spec.weight,
            num_active_gpus=p.num_active_gpus,
            max_ranks=len(p.ranks),
            order=p.admitted_seq,
        )
        for p in rollers
    ]
    split = split_rollout(claims, rollout_budget(sched, rollers))
    sched.targets = split.targets
    sched.ideal = split.ideal


class RoundPlanner:
    """Per-round candidate search for one scheduler; built fresh every round."""

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        # pipeline -> bits of free bundles it may not use this round (reserved, backing off);
        # neither changes within a round, so each is looked at once
        self._unusable: dict[str, int] = {}
        #: Searching for a pipeline's first bundle: donors given ranks by a recent rebalance
        #: donate too (see is_donor).
        self.first_bundle = False

    def _usable_by(self, rank: Rank, pipeline_id: str) -> bool:
        if rank.status is not RankStatus.INACTIVE or rank.retry_after_s > self.sched.now:
            return False
        reservations = self.sched.reservations
        if reservations.reserved_for:
            return not any(reservations.blocks(g, pipeline_id) for g in rank.gpus)
        return True

    def free_fit(self, pipeline: PipelineState) -> Rank | None:
        """The inactive rank of `pipeline` on the free bundle with the lowest GPU ids (its
        lowest free rank when its mapping is in GPU order): the lowest bit of the free bits
        and the pipeline's bits, so the search is a few big-int operations, not a scan."""
        cluster = self.sched.cluster
        pid = pipeline.pipeline_id
        unusable = self._unusable.get(pid, 0)
        candidates = cluster.free_bits & pipeline.slot_bits
        if unusable:
            candidates &= ~unusable
        reserved = self.sched.reservations.reserved_for
        now = self.sched.now
        while candidates:
            lowest = candidates & -candidates
            rank = pipeline.rank_by_slot[cluster.slot_of_bit[lowest.bit_length() - 1]]
            # A free bundle's rank is inactive; it may still be backing off or reserved.
            if rank.retry_after_s <= now and (not reserved or self._usable_by(rank, pid)):
                return rank
            candidates ^= lowest
            unusable |= lowest
            self._unusable[pid] = unusable
        return None

    def donor_fit(self, pipeline: PipelineState, donors: list[PipelineState]) -> tuple[Rank, list[Rank]] | None:
        """A rank of `pipeline` whose bundle is free or held by donors' active ranks, taking
        from no donor more than it holds above its target: the first that takes a single rank
        of the donor with the most work left, else the one that needs the fewest donor ranks."""
        mine = pipeline.rank_by_slot
        pid = pipeline.pipeline_id
        donor_ids: set[str] | None = None  # only needed for bundles that overlap others
        partial = self.sched.cluster.partial_overlap
        now = self.sched.now
        best: tuple[int, Rank, list[Rank]] | None = None
        for donor in donors:
            for donor_rank in donor.active.values():
                if donor_rank.status is not RankStatus.ACTIVE or donor_rank.shrink_retry_after_s > now:
                    continue
                if donor_rank.slot not in partial:
                    # An aligned bundle: the receiver's rank there (if any) needs exactly it,
                    # and one rank is never more than a donor holds above its target.
                    rank = mine.get(donor_rank.slot)
                    if rank is not None and self._usable_by(rank, pid):
                        return rank, [donor_rank]
                    continue
                if donor_ids is None:
                    donor_ids = {d.pipeline_id for d in donors}
                for slot in self._overlapping(donor_rank.slot):
                    rank = mine.get(slot)
                    if rank is None or not self._usable_by(rank, pid):
                        continue
                    victims = self._victims(rank.gpus, pid, donor_ids)
                    if victims is None or self._overdrawn(victims, {}):
                        continue
                    if len(victims) == 1:
                        return rank, victims
                    if best is None or len(victims) < best[0]:
                        best = (len(victims), rank, victims)
        return None if best is None else (best[1], best[2])

    def relocation_fit(self, pipeline: PipelineState, rollers: set[str]) -> Move | None:
        """A first bundle for `pipeline` that takes ranks of other rollers beyond what they
        hold above target (or that are not donors at all), each such roller made whole in the
        same round by as many of its own ranks elsewhere, on free bundles or on bundles of
        donors within their excess. This is what gives a TP-4 newcomer its bundle when the
        GPUs are held by TP-1 or TP-2 ranks of pipelines at their targets: no roller ends
        below its target, and none moves for less than a whole first bundle of another."""
        pid = pipeline.pipeline_id
        for rank in pipeline.ranks:
            if not self._usable_by(rank, pid):
                continue
            victims = self._victims(rank.gpus, pid, rollers)
            if not victims:
                continue  # blocked (or free: free_fit would have found it)
            move = self._make_whole(rank, victims, rollers)
            if move is not None:
                return move
        return None

    def _make_whole(self, rank: Rank, victims: list[Rank], rollers: set[str]) -> Move | None:
        sched = self.sched
        # GPUs of the receiver's bundle and of every rank already displaced: a replacement
        # never lands on them (a displaced rank is shrunk once and counted once).
        claimed = set(rank.gpus).union(g for victim in victims for g in victim.gpus)
        spent: dict[str, int] = {}
        for victim in victims:
            spent[victim.pipeline_id] = spent.get(victim.pipeline_id, 0) + len(victim.gpus)
        shortfall = {
            pid: lost - max(self._excess(sched.pipelines[pid]), 0) for pid, lost in spent.items()
        }
        extra: list[tuple[Rank, list[Rank]]] = []
        for victim_id, short in shortfall.items():
            owner = sched.pipelines[victim_id]
            while short > 0:
                found = self._replacement(owner, claimed, spent, rollers)
                if found is None:
                    return None
                extra.append(found)
                claimed.update(found[0].gpus)
                claimed.update(g for victim in found[1] for g in victim.gpus)
                short -= len(found[0].gpus)
        return rank, victims, extra

    def _replacement(
        self, owner: PipelineState, claimed: set[int], spent: dict[str, int], rollers: set[str]
    ) -> tuple[Rank, list[Rank]] | None:
        """A rank of `owner` off `claimed`, on a free bundle (preferred) or on donors' ranks
        within what they hold above target (counting `spent`, which this updates)."""
        oid = owner.pipeline_id
        donors = {
            pid for pid in rollers if pid != oid and is_donor(self.sched, self.sched.pipelines[pid], self.first_bundle)
        }
        fallback: tuple[Rank, list[Rank]] | None = None
        for candidate in owner.ranks:
            if not claimed.isdisjoint(candidate.gpus) or not self._usable_by(candidate, oid):
                continue
            victims = self._victims(candidate.gpus, oid, donors)
            if victims is None:
                continue
            if not victims:
                return candidate, []
            if fallback is None and not self._overdrawn(victims, spent):
                fallback = (candidate, victims)
        if fallback is not None:
            for victim in fallback[1]:
                spent[victim.pipeline_id] = spent.get(victim.pipeline_id, 0) + len(victim.gpus)
        return fallback

    def _excess(self, pipeline: PipelineState) -> int:
        """GPUs `pipeline` may give away by a rebalance: what it holds above its target."""
        if not is_donor(self.sched, pipeline, self.first_bundle):
            return 0
        return pipeline.num_active_gpus - self.sched.targets.get(pipeline.pipeline_id, 0)

    def _overdrawn(self, victims: list[Rank], spent: dict[str, int]) -> bool:
        """Whether taking `victims` (on top of `spent`) takes a donor below its target."""
        loss: dict[str, int] = {}
        for victim in victims:
            loss[victim.pipeline_id] = loss.get(victim.pipeline_id, 0) + len(victim.gpus)
        pipelines = self.sched.pipelines
        return any(lost + spent.get(pid, 0) > self._excess(pipelines[pid]) for pid, lost in loss.items())

    def _overlapping(self, slot: int) -> set[int]:
        cluster = self.sched.cluster
        cache = cluster.overlap_cache
        found = cache.get(slot)
        if found is None:
            found = {s for g in cluster.slot_gpus[slot] for s in cluster.slots_by_gpu[g]}
            cache[slot] = found
        return found

    def _victims(self, gpus: tuple[int, ...], receiver: str, owners: set[str]) -> list[Rank] | None:
        """The active ranks on `gpus`, or None if a GPU is lost, held by anything else, or by a
        rank of a pipeline not in `owners` (or of the receiver), or backing off a failed shrink."""
        cluster = self.sched.cluster
        now = self.sched.now
        victims: dict[int, Rank] = {}
        for gpu in gpus:
            holder = cluster.owner[gpu]
            if holder is None:
                if gpu in cluster.offline:
                    return None
                continue
            if type(holder) is not Rank or holder.status is not RankStatus.ACTIVE:
                return None
            if holder.pipeline_id not in owners or holder.pipeline_id == receiver:
                return None
            if holder.shrink_retry_after_s > now:
                return None
            victims[id(holder)] = holder
        return list(victims.values())


#: A move: the receiver's rank, the ranks it displaces, and for rollers it would take below
#: their targets, the ranks that make them whole again (each with the ranks it displaces).
Move = tuple[Rank, list[Rank], list[tuple[Rank, list[Rank]]]]


def is_donor(sched: Scheduler, pipeline: PipelineState, first_bundle: bool = False) -> bool:
    """Above its target, and not itself given ranks by a rebalance too recently (unless it
    is asked for another pipeline's first bundle: the one-bundle minimum is not noise)."""
    return pipeline.num_active_gpus > sched.targets.get(pipeline.pipeline_id, 0) and (
        first_bundle or sched.now >= pipeline.last_rebalanced_in_s + sched.config.min_rebalance_interval_s
    )


def may_receive(sched: Scheduler, pipeline: PipelineState) -> bool:
    """May take ranks from donors: it did not give ranks away by a rebalance too recently."""
    return sched.now >= pipeline.last_rebalanced_out_s + sched.config.min_rebalance_interval_s


def plan_rlix(sched: Scheduler) -> None:
    rollers = sched.rolling_pipelines()
    if not rollers:
        sched.targets, sched.ideal = {}, {}
        return
    compute_split(sched, rollers)
    planner = RoundPlanner(sched)
    # Lending free GPUs can put a pipeline above its target, which makes it a donor for a
    # pipeline that could not be served before; so move, fill, and move again until the fill
    # has nothing left to lend (each pass lends at least one bundle, so this ends).
    while True:
        _move_to_targets(sched, rollers, planner)
        if not fill_free(sched, rollers, planner):
            break


def _move_to_targets(sched: Scheduler, rollers: list[PipelineState], planner: RoundPlanner) -> None:
    """Give ranks to pipelines short of their target by a whole bundle, neediest first (the
    largest shortfall relative to target; admission order breaks ties)."""
    ledger = sched.ledger
    targets = sched.targets
    stickiness = 1.0 + sched.config.rebalance_margin_bundles
    heap: list[tuple[float, int, PipelineState, int]] = []
    for p in rollers:
        target = targets.get(p.pipeline_id, 0)
        if p.num_active_gpus + p.tp <= target:
            heap.append((-(target - p.num_active_gpus) / target, p.admitted_seq, p, target))
    heapq.heapify(heap)
    donors = _Donors(sched, rollers)
    item = heapq.heappop(heap) if heap else None
    while item is not None:
        _, seq, pipeline, target = item
        rank = planner.free_fit(pipeline)
        if rank is not None:
            ledger.expand(rank)
        elif not (
            # The margin and the no-reversal interval keep ranks from moving back and forth
            # for marginal gains; a first bundle is not one, and it comes first.
            (
                pipeline.num_active_gpus == 0
                or (pipeline.num_active_gpus + pipeline.tp * stickiness <= target and may_receive(sched, pipeline))
            )
            and donors.move_one_to(pipeline, planner)
        ):
            item = heapq.heappop(heap) if heap else None  # placement-limited this round
            continue
        active = pipeline.num_active_gpus
        if active + pipeline.tp <= target:
            # Back in line and the neediest out, in one step (often the same pipeline again).
            item = heapq.heappushpop(heap, (-(target - active) / target, seq, pipeline, target))
        else:
            item = heapq.heappop(heap) if heap else None


class _Donors:
    """Pipelines above their target, most rollout work left first; built on first use."""

    def __init__(self, sched: Scheduler, rollers: list[PipelineState]) -> None:
        self.sched = sched
        self.rollers = rollers
        self.donors: list[PipelineState] | None = None

    def move_one_to(self, pipeline: PipelineState, planner: RoundPlanner) -> bool:
        """Shrink ranks of donors (or, for a first bundle, relocate ranks of others) to expand
        one rank of `pipeline`; whether any."""
        sched = self.sched
        if self.donors is None:
            self.donors = [d for d in self.rollers if is_donor(sched, d)]
            self.donors.sort(key=lambda d: (-d.demand, d.admitted_seq))
        move: Move | None = None
        if pipeline.num_active_gpus:
            found = planner.donor_fit(pipeline, self.donors)
            if found is not None:
                move = (found[0], found[1], [])
        else:
            planner.first_bundle = True
            try:
                above = [d for d in self.rollers if is_donor(sched, d, first_bundle=True)]
                above.sort(key=lambda d: (-d.demand, d.admitted_seq))
                found = planner.donor_fit(pipeline, above)
                if found is not None:
                    move = (found[0], found[1], [])
                else:
                    move = planner.relocation_fit(pipeline, {p.pipeline_id for p in self.rollers})
            finally:
                planner.first_bundle = False
        if move is None:
            return False
        self._carry_out(pipeline, move)
        return True

    def _carry_out(self, pipeline: PipelineState, move: Move) -> None:
        sched = self.sched
        ledger = sched.ledger
        rank, victims, replacements = move
        net: dict[str, int] = {}
        for victim in victims + [v for _, displaced in replacements for v in displaced]:
            ledger.shrink(victim, "rebalance")
            net[victim.pipeline_id] = net.get(victim.pipeline_id, 0) - len(victim.gpus)
        ledger.expand(rank)
        pipeline.last_rebalanced_in_s = sched.now
        for replacement, _ in replacements:
            ledger.expand(replacement)
            net[replacement.pipeline_id] += len(replacement.gpus)
        assert self.donors is not None
        for pid, change in net.items():
            affected = sched.pipelines[pid]
            if change < 0:
                affected.last_rebalanced_out_s = sched.now
            if affected in self.donors and not is_donor(sched, affected):
                self.donors.remove(affected)


def fill_free(sched: Scheduler, rollers: list[PipelineState], planner: RoundPlanner | None = None) -> bool:
    """Lend every free bundle a rolling pipeline can use, most under-served pipeline first.
    Returns whether anything was lent."""
    if not sched.cluster.free_bits:
        return False
    planner = planner or RoundPlanner(sched)
    ledger = sched.ledger
    order = sorted(
        (p for p in rollers if p.demand > 0),
        key=lambda p: (p.num_active_gpus / _share(p), p.admitted_seq),
    )
    lent = False
    progress = True
    while progress and sched.cluster.free_bits:
        progress = False
        for pipeline in order:
            rank = planner.free_fit(pipeline)
            if rank is not None:
                ledger.expand(rank)
                progress = lent = True
    return lent


def _share(pipeline: PipelineState) -> float:
    """demand x tp x weight, kept within [1e-300, 1e300] so that ratios to it stay finite."""
    return min(max(pipeline.demand * (pipeline.tp * pipeline.spec.weight), 1e-300), 1e300)
