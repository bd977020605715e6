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
   that could work; the next round takes them back if a target calls for it.

Finding a free bundle is an intersection of the free-slot set with the pipeline's slots, and
finding a donor rank looks only at donors' active ranks, so a round costs about the number of
moves times the active ranks, not GPUs times pipelines.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from rlix.policy.split import Claim, split_rollout
from rlix.policy.state import PipelineState, Rank, RankStatus

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler


def rollout_budget(sched: Scheduler, rollers: list[PipelineState]) -> int:
    """GPUs in the rollers' mappings that are free to them or already held by their ranks."""
    if not rollers:
        return 0
    cluster = sched.cluster
    reservations = sched.reservations
    owner = cluster.owner
    offline = cluster.offline
    slots: set[int] = set()
    for pipeline in rollers:
        slots.update(pipeline.rank_by_slot)
    usable: set[int] = set()
    for slot in slots:
        usable.update(cluster.slot_gpus[slot])
    budget = 0
    for gpu in usable:
        holder = owner[gpu]
        if holder is None:
            if gpu in offline or gpu in reservations.reserved_for:
                continue
            budget += 1
        elif isinstance(holder, Rank):
            budget += 1
    return budget


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
        self._free_candidates: dict[str, tuple[int, list[Rank]]] = {}

    def _usable_by(self, rank: Rank, pipeline_id: str) -> bool:
        if rank.status is not RankStatus.INACTIVE or rank.retry_after_s > self.sched.now:
            return False
        reservations = self.sched.reservations
        if reservations.reserved_for:
            return not any(reservations.blocks(g, pipeline_id) for g in rank.gpus)
        return True

    def free_fit(self, pipeline: PipelineState) -> Rank | None:
        """The lowest inactive rank of `pipeline` whose bundle is entirely free."""
        cluster = self.sched.cluster
        cached = self._free_candidates.get(pipeline.pipeline_id)
        if cached is None or (not cached[1] and cached[0] != cluster.free_epoch):
            free = cluster.free_slots
            mine = pipeline.rank_by_slot
            if len(free) < len(mine):
                found = [mine[s] for s in free if s in mine]
            else:
                found = [r for s, r in mine.items() if s in free]
            found.sort(key=lambda r: r.dp_rank, reverse=True)
            cached = self._free_candidates[pipeline.pipeline_id] = (cluster.free_epoch, found)
        candidates = cached[1]
        while candidates:
            rank = candidates.pop()
            if rank.slot in cluster.free_slots and self._usable_by(rank, pipeline.pipeline_id):
                return rank
        if cached[0] != cluster.free_epoch:
            return self.free_fit(pipeline)  # GPUs were freed since the search: look again
        return None

    def donor_fit(self, pipeline: PipelineState, donors: list[PipelineState]) -> tuple[Rank, list[Rank]] | None:
        """A rank of `pipeline` whose bundle is free or held by donors' active ranks, needing
        the fewest donor ranks, from the donor with the most work left, lowest rank first."""
        mine = pipeline.rank_by_slot
        best: tuple[tuple[int, int], Rank, list[Rank]] | None = None
        for donor in donors:
            for donor_rank in list(donor.active.values()):
                if donor_rank.status is not RankStatus.ACTIVE:
                    continue
                for slot in self._overlapping(donor_rank.slot):
                    rank = mine.get(slot)
                    if rank is None or not self._usable_by(rank, pipeline.pipeline_id):
                        continue
                    victims = self._victims(rank, donors)
                    if victims is None:
                        continue
                    score = (len(victims), rank.dp_rank)
                    if best is None or score < best[0]:
                        best = (score, rank, victims)
            if best is not None and best[0][0] == 1:
                break  # one victim from the most-loaded donor: nothing scores better
        return None if best is None else (best[1], best[2])

    def _overlapping(self, slot: int) -> set[int]:
        cluster = self.sched.cluster
        cache = cluster.overlap_cache
        found = cache.get(slot)
        if found is None:
            found = {s for g in cluster.slot_gpus[slot] for s in cluster.slots_by_gpu[g]}
            cache[slot] = found
        return found

    def _victims(self, rank: Rank, donors: list[PipelineState]) -> list[Rank] | None:
        cluster = self.sched.cluster
        donor_ids = {d.pipeline_id for d in donors}
        victims: dict[int, Rank] = {}
        for gpu in rank.gpus:
            holder = cluster.owner[gpu]
            if holder is None:
                if gpu in cluster.offline:
                    return None
                continue
            if not isinstance(holder, Rank) or holder.status is not RankStatus.ACTIVE:
                return None
            if holder.pipeline_id not in donor_ids:
                return None
            victims[id(holder)] = holder
        return list(victims.values())


def _short(sched: Scheduler, pipeline: PipelineState, margin: float = 0.0) -> bool:
    return pipeline.num_active_gpus + pipeline.tp * (1.0 + margin) <= sched.targets.get(pipeline.pipeline_id, 0)


def plan_rlix(sched: Scheduler) -> None:
    rollers = sched.rolling_pipelines()
    if not rollers:
        sched.targets, sched.ideal = {}, {}
        return
    compute_split(sched, rollers)
    planner = RoundPlanner(sched)
    ledger = sched.ledger
    margin = sched.config.rebalance_margin_bundles
    targets = sched.targets
    heap = [(_deficit_key(sched, p), p.admitted_seq, p) for p in rollers if _short(sched, p)]
    heapq.heapify(heap)
    while heap:
        _, _, pipeline = heapq.heappop(heap)
        rank = planner.free_fit(pipeline)
        if rank is not None:
            ledger.expand(rank)
        elif _short(sched, pipeline, margin):
            donors = [d for d in rollers if d.num_active_gpus > targets.get(d.pipeline_id, 0)]
            donors.sort(key=lambda d: (-d.demand, d.admitted_seq))
            found = planner.donor_fit(pipeline, donors)
            if found is None:
                continue  # placement-limited this round
            rank, victims = found
            for victim in victims:
                ledger.shrink(victim, "rebalance")
            ledger.expand(rank)
        else:
            continue
        if _short(sched, pipeline):
            heapq.heappush(heap, (_deficit_key(sched, pipeline), pipeline.admitted_seq, pipeline))
    fill_free(sched, rollers, planner)


def _deficit_key(sched: Scheduler, pipeline: PipelineState) -> float:
    target = sched.targets.get(pipeline.pipeline_id, 0)
    return -(target - pipeline.num_active_gpus) / max(target, 1)


def fill_free(sched: Scheduler, rollers: list[PipelineState], planner: RoundPlanner | None = None) -> None:
    """Lend every free bundle a rolling pipeline can use, most under-served pipeline first."""
    if not sched.cluster.free_slots:
        return
    planner = planner or RoundPlanner(sched)
    ledger = sched.ledger
    order = sorted(
        (p for p in rollers if p.demand > 0),
        key=lambda p: (p.num_active_gpus / max(p.demand * p.tp * p.spec.weight, 1e-12), p.admitted_seq),
    )
    progress = True
    while progress and sched.cluster.free_slots:
        progress = False
        for pipeline in order:
            rank = planner.free_fit(pipeline)
            if rank is not None:
                ledger.expand(rank)
                progress = True
