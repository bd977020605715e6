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
    """GPUs in the rollers' mappings that are free or held by rollout ranks, less reserved ones."""
    if not rollers:
        return 0
    cluster = sched.cluster
    owner = cluster.owner
    offline = cluster.offline
    reserved = sched.reservations.reserved_for
    budget = 0
    for gpu in _rollout_union(sched, rollers):
        # A reserved GPU does not count even under a rank: the request it waits for will take it.
        if gpu in reserved:
            continue
        holder = owner[gpu]
        if holder is None:
            if gpu not in offline:
                budget += 1
        elif type(holder) is Rank:
            budget += 1
    return budget


def _rollout_union(sched: Scheduler, rollers: list[PipelineState]) -> tuple[int, ...]:
    """Every GPU some roller's rollout mapping covers; cached while the set of rollers holds."""
    key = frozenset(p.pipeline_id for p in rollers)
    cached = sched.cluster.union_cache
    if cached is not None and cached[0] == key:
        return cached[1]
    union: set[int] = set()
    for pipeline in rollers:
        union.update(pipeline.spec.rollout.mapping)
    gpus = tuple(sorted(union))
    sched.cluster.union_cache = (key, gpus)
    return gpus


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
        # pipeline -> (next dp_rank to look at, how much of cluster.freed_log it has seen)
        self._cursor: dict[str, tuple[int, int]] = {}
        sched.cluster.freed_log.clear()

    def _usable_by(self, rank: Rank, pipeline_id: str) -> bool:
        if rank.status is not RankStatus.INACTIVE or rank.retry_after_s > self.sched.now:
            return False
        reservations = self.sched.reservations
        if reservations.reserved_for:
            return not any(reservations.blocks(g, pipeline_id) for g in rank.gpus)
        return True

    def free_fit(self, pipeline: PipelineState) -> Rank | None:
        """The lowest inactive rank of `pipeline` whose bundle is entirely free.

        Within a round bundles mostly go from free to taken, so a cursor walks the ranks
        once; a bundle freed behind the cursor (`cluster.freed_log`) moves it back."""
        cluster = self.sched.cluster
        free, log = cluster.free_slots, cluster.freed_log
        pid = pipeline.pipeline_id
        cursor, seen = self._cursor.get(pid, (0, 0))
        if seen < len(log):
            mine = pipeline.rank_by_slot
            for slot in log[seen:]:
                rank = mine.get(slot)
                if rank is not None and rank.dp_rank < cursor:
                    cursor = rank.dp_rank
        ranks = pipeline.ranks
        found: Rank | None = None
        while cursor < len(ranks):
            rank = ranks[cursor]
            cursor += 1
            if rank.slot in free and self._usable_by(rank, pid):
                found = rank
                break
        self._cursor[pid] = (cursor, len(log))
        return found

    def donor_fit(self, pipeline: PipelineState, donors: list[PipelineState]) -> tuple[Rank, list[Rank]] | None:
        """A rank of `pipeline` whose bundle is free or held by donors' active ranks: the
        first that takes a single rank of the donor with the most work left, else the one
        that needs the fewest donor ranks."""
        mine = pipeline.rank_by_slot
        donor_ids = {d.pipeline_id for d in donors}
        partial = self.sched.cluster.partial_overlap
        best: tuple[int, Rank, list[Rank]] | None = None
        for donor in donors:
            for donor_rank in donor.active.values():
                if donor_rank.status is not RankStatus.ACTIVE:
                    continue
                slots = self._overlapping(donor_rank.slot) if donor_rank.slot in partial else (donor_rank.slot,)
                for slot in slots:
                    rank = mine.get(slot)
                    if rank is None or not self._usable_by(rank, pipeline.pipeline_id):
                        continue
                    victims = self._victims(rank, donor_ids)
                    if victims is None:
                        continue
                    if len(victims) == 1:
                        return rank, victims
                    if best is None or len(victims) < best[0]:
                        best = (len(victims), rank, victims)
        return None if best is None else (best[1], best[2])

    def _overlapping(self, slot: int) -> set[int]:
        cluster = self.sched.cluster
        cache = cluster.overlap_cache
        found = cache.get(slot)
        if found is None:
            found = {s for g in cluster.slot_gpus[slot] for s in cluster.slots_by_gpu[g]}
            cache[slot] = found
        return found

    def _victims(self, rank: Rank, donor_ids: set[str]) -> list[Rank] | None:
        cluster = self.sched.cluster
        victims: dict[int, Rank] = {}
        for gpu in rank.gpus:
            holder = cluster.owner[gpu]
            if holder is None:
                if gpu in cluster.offline:
                    return None
                continue
            if type(holder) is not Rank or holder.status is not RankStatus.ACTIVE:
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
    # Lending free GPUs can put a pipeline above its target, which makes it a donor for a
    # pipeline that could not be served before; so move, fill, and move again until the fill
    # has nothing left to lend (each pass lends at least one bundle, so this ends).
    while True:
        _move_to_targets(sched, rollers, planner)
        if not fill_free(sched, rollers, planner):
            break


def _move_to_targets(sched: Scheduler, rollers: list[PipelineState], planner: RoundPlanner) -> None:
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


def _deficit_key(sched: Scheduler, pipeline: PipelineState) -> float:
    target = sched.targets.get(pipeline.pipeline_id, 0)
    return -(target - pipeline.num_active_gpus) / max(target, 1)


def fill_free(sched: Scheduler, rollers: list[PipelineState], planner: RoundPlanner | None = None) -> bool:
    """Lend every free bundle a rolling pipeline can use, most under-served pipeline first.
    Returns whether anything was lent."""
    if not sched.cluster.free_slots:
        return False
    planner = planner or RoundPlanner(sched)
    ledger = sched.ledger
    order = sorted(
        (p for p in rollers if p.demand > 0),
        key=lambda p: (p.num_active_gpus / max(p.demand * p.tp * p.spec.weight, 1e-12), p.admitted_seq),
    )
    lent = False
    progress = True
    while progress and sched.cluster.free_slots:
        progress = False
        for pipeline in order:
            rank = planner.free_fit(pipeline)
            if rank is not None:
                ledger.expand(rank)
                progress = lent = True
    return lent
