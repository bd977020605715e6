"""Planning rollout ranks: expansions onto free GPUs and moves between pipelines.

The `rlix` policy computes split targets (`rlix.policy.split`) over the GPUs rollout may use
this round, then:

1. Moves: while some pipeline is short of its target by a whole bundle, give it one rank, the
   most under-served pipeline first. A free bundle (no donor) is preferred; otherwise a bundle
   held by active ranks of pipelines above their targets, taken from the donor with the most
   rollout work left (a nearly finished pipeline is about to free its GPUs anyway, and
   preempting it would waste almost-complete trajectories), and never more than a donor
   holds above its target; for a first bundle, ranks of others may be relocated (see
   `rlix.policy.placement`). A rank touched in a round is not touched again in it.
2. Fill: GPUs still free are lent to rolling pipelines that can use them, so nothing idles
   that could work; a later move takes them back if a target calls for it. A pipeline that
   was lent GPUs may now be above target, so moves and fill repeat until nothing is lent.

Targets follow remaining work, except that a pipeline in its tail (nothing queued) is held at
its busy ranks (`keep_busy_tail`): more ranks cannot help it, unless its driver migrates running
trajectories onto a joining rank and it runs many per rank, on-policy, when it takes part in the
split with its busy ranks as a floor (`tail_spread_batch`, `spreads`).

Before both, loans of the homes of pipelines away between steps are priced and reclaimed on
time (`rlix.policy.look_ahead`): bundles whose loan would not pay are kept from the pipelines
they would not pay for, in the moves and the fill alike.

Finding a free bundle is a few operations on bitsets (free slots and a pipeline's slots as
Python ints: linear in the number of bundles, but at machine-word speed in C), and finding a
donor rank looks only at donors' active ranks, so a round costs about the number of moves, not
GPUs times pipelines. The search itself lives in `rlix.policy.placement`, the moves from donors in
`rlix.policy.donors`.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

from rlix.policy.donors import Donors
from rlix.policy.finish import set_split_weights
from rlix.policy.look_ahead import Loans, move_s
from rlix.policy.placement import RoundPlanner
from rlix.policy.split import Claim, split_rollout
from rlix.policy.state import PipelineState, Rank
from rlix.policy.training_yields import hand_over_first_bundles, yields
from rlix.policy.wake_ahead import wake_owners
from rlix.policy.warm import release_wanted

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler


def rollout_budget(sched: Scheduler, rollers: list[PipelineState]) -> int:
    """GPUs in the rollers' mappings that are free or held by rollout ranks, less reserved ones
    (a reserved GPU does not count even under a rank: the request it waits for will take it).

    Counted from the few exclusions (non-rollout holdings, lost and reserved GPUs) rather than
    GPU by GPU, so it costs the size of those, not of the cluster. The holdings and lost GPUs
    change far less often than rounds run (a grant, a release, a fault), so their part is kept
    while `ClusterState.exclusions_version` and the union stand; reservations are per round."""
    if not rollers:
        return 0
    union = _rollout_union(sched, rollers)
    cluster = sched.cluster
    cached = cluster.excluded_cache
    if cached is not None and cached[0] is union and cached[1] == cluster.exclusions_version:
        excluded = cached[2]
    else:
        # Set intersections run in C: at 1,024 GPUs a round otherwise spends most of this
        # function testing training holdings' GPUs one by one.
        held = set(union.intersection(cluster.offline))
        for pipeline in sched.pipelines.values():
            for hold in pipeline.holdings.values():
                held.update(union.intersection(hold.gpus))
        excluded = frozenset(held)
        cluster.excluded_cache = (union, cluster.exclusions_version, excluded)
    reserved = sched.reservations.reserved_for
    if reserved:
        return len(union) - len(excluded.union(union.intersection(reserved)))
    return len(union) - len(excluded)


def _rollout_union(sched: Scheduler, rollers: list[PipelineState]) -> frozenset[int]:
    """Every GPU some roller's rollout mapping covers; cached while the set of rollers holds
    (identified by registration numbers, which are never reused)."""
    key = frozenset(p.registered_seq for p in rollers)
    cached = sched.cluster.union_cache
    if cached is not None and cached[0] == key:
        return cached[1]
    # Mappings alike (often the whole pool) are united once: at 1,024 GPUs a union GPU by GPU
    # over ~250 rollers cost more than the rest of the split.
    union = frozenset().union(*{pipeline.spec.rollout.mapping for pipeline in rollers})
    sched.cluster.union_cache = (key, union)
    return union


def compute_split(sched: Scheduler, rollers: list[PipelineState]) -> None:
    """Split targets over the rollout budget. With `keep_busy_tail`, a pipeline in its tail
    is held at exactly its busy ranks (at least one bundle while it has work) and the others
    split what is left; one whose tail still gains from more ranks (`spreads`) takes part in
    the split instead, its busy ranks a floor."""
    budget = rollout_budget(sched, rollers)
    demands = [p.demand for p in rollers]
    fixed, spread = _tail_targets(sched, rollers, demands, budget) if sched.config.keep_busy_tail else ({}, {})
    # Positional: keyword arguments cost about a third more, once per roller every round.
    # (pipeline_id, demand, tp, weight, num_active_gpus, max_ranks, order, floor)
    floors = sched.config.home_floor
    claims = [
        Claim(p.pipeline_id, demand, p.tp, p.split_weight, p.num_active_gpus, len(p.ranks), p.admitted_seq,
              max(_home_floor(p, demand) if floors else 0, spread.get(p.pipeline_id, 0)))
        for p, demand in zip(rollers, demands, strict=True)
        if p.pipeline_id not in fixed
    ]
    # The split is a function of its claims and budget alone, and a round often has the last
    # one's (a report of where work runs, an applied move): then it is not worked out again.
    key = (budget - sum(fixed.values()), tuple(claims))
    memo = sched.split_memo
    if memo is not None and memo[0] == key:
        split = memo[1]
    else:
        split = split_rollout(claims, key[0])
        sched.split_memo = (key, split)
    if fixed:
        sched.targets = {**split.targets, **fixed}
        sched.ideal = {**split.ideal, **{pid: float(n) for pid, n in fixed.items()}}
    else:
        sched.targets = split.targets
        sched.ideal = split.ideal


def _home_floor(pipeline: PipelineState, demand: float) -> int:
    """The GPUs of its home the pipeline can use: its rollout bundles inside the home, at most
    one bundle per trajectory left (`demand`)."""
    tp = pipeline.tp
    wanted = math.ceil(demand) * tp if demand < pipeline.home_rollout_gpus else pipeline.home_rollout_gpus
    return min(pipeline.home_rollout_gpus, wanted)


def _tail_targets(
    sched: Scheduler, rollers: list[PipelineState], demands: list[float], budget: int
) -> tuple[dict[str, int], dict[str, int]]:
    """Targets of the pipelines in their tail: the GPUs of their busy ranks outside reserved
    GPUs (a reserved one goes to the request that waits for it), one bundle at least while
    they have work; and, apart, the same figure as a floor for those whose tail spreads. None
    at all if the held ones would leave too little for every other pipeline with work to have
    its one bundle: that minimum comes first."""
    reserved = sched.reservations.reserved_for
    fixed: dict[str, int] = {}
    spread: dict[str, int] = {}
    others = 0  # the first bundles of the pipelines not held
    spread_batch = sched.config.tail_spread_batch
    # The ranks on reserved GPUs, found from the GPUs (a few) rather than from every busy rank
    # of every pipeline in its tail (hundreds a round on a pool of hundreds of jobs).
    on_reserved: dict[str, set[Rank]] = {}
    if reserved:
        owner_of = sched.cluster.owner
        for gpu in reserved:
            holder = owner_of[gpu]
            if type(holder) is Rank:
                on_reserved.setdefault(holder.pipeline_id, set()).add(holder)
    for pipeline, demand in zip(rollers, demands, strict=True):
        first_bundle = pipeline.tp if demand > 0 else 0
        if pipeline.held_in_tail:
            busy = pipeline.busy_gpus()
            blocked = on_reserved.get(pipeline.pipeline_id)
            if blocked:
                active, busy_ranks = pipeline.active, pipeline.busy
                busy -= sum(len(r.gpus) for r in blocked if r.dp_rank in busy_ranks and active.get(r.dp_rank) is r)
            if not (spread_batch and spreads(sched, pipeline, spread_batch)):
                fixed[pipeline.pipeline_id] = max(busy, first_bundle)
                continue
            spread[pipeline.pipeline_id] = busy
        others += first_bundle
    return (fixed if sum(fixed.values()) + others <= budget else {}), spread


def spreads(sched: Scheduler, pipeline: PipelineState, batch: int) -> bool:
    """An on-policy pipeline in its tail still gains from more ranks: its driver moves running
    trajectories onto a rank that joins (`PipelineSpec.rollout_migrates`), and its busy ranks
    run more than `batch` trajectories each on average, so splitting them shortens every
    decode iteration (its time grows with the batch and the KV cache it reads). Its step waits
    for the last of them and nothing else of it can run meanwhile; an off-policy pipeline's
    (or adapter's) next rollout overlaps its tail, and spreading such tails measured no better
    (8 seeds, before holders kept their minimum bundles: blog-4on12 181.2 -> 180.3 steps/h;
    mixed-lora's multi-LoRA pipelines with one off-policy adapter: 116.2 -> 115.5).

    And only while a new rank pays for its moves: until its tails are measured, or while they
    last (a running mean, `PipelineState.tail_s`) longer than `loan_payback` + 1 times its
    weight load and offload, the price look-ahead puts on a loan. A short tail ends before the
    ranks it spreads onto have loaded and worked: spreading math-rlvr's, of a few seconds, put
    its loading share at 6.4% against 6.2% without, at the same steps/h (8 seeds);
    agentic-4x32's last minutes and still spread."""
    in_flight = pipeline.in_flight
    if not pipeline.spec.rollout_migrates or not in_flight or not pipeline.on_policy:
        return False
    took = pipeline.tail_s
    if took == took and took <= (1.0 + sched.config.loan_payback) * (move_s(pipeline.load_s) + move_s(pipeline.offload_s)):
        return False
    return sum(in_flight.values()) > batch * max(1, pipeline.num_busy_active)


def plan_rlix(sched: Scheduler) -> None:
    rollers = sched.rolling_pipelines()
    loans = Loans(sched, rollers)
    if loans.owners:
        sched.wake_at_s = min(loans.reclaim(), wake_owners(sched, loans))
    else:
        sched.wake_at_s = math.inf
    if not rollers:
        sched.targets, sched.ideal = {}, {}
        return
    set_split_weights(sched, rollers)
    compute_split(sched, rollers)
    if yields(sched) and hand_over_first_bundles(sched, rollers):
        compute_split(sched, rollers)
    planner = RoundPlanner(sched)
    if sched.config.look_ahead:
        planner.loans = loans  # what each roller may not be lent, asked only of those placed
    if sched.config.keep_warm:
        release_wanted(sched, rollers, planner)
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
    cluster = sched.cluster
    now, reserved = planner.now, planner.reserved
    targets = sched.targets
    stickiness = 1.0 + sched.config.rebalance_margin_bundles
    heap: list[tuple[float, int, PipelineState, int]] = []
    for p in rollers:
        target = targets.get(p.pipeline_id, 0)
        if p.num_active_gpus + p.tp <= target:
            heap.append((-(target - p.num_active_gpus) / target, p.admitted_seq, p, target))
    heapq.heapify(heap)
    donors = Donors(sched, rollers)
    item = heapq.heappop(heap) if heap else None
    while item is not None:
        _, seq, pipeline, target = item
        # planner.free_fit, its common case inlined (this runs once per rank started): the
        # free bundle with the lowest GPU ids is the answer unless GPUs are reserved, that
        # rank is backing off or the pipeline may not use some free bundles, and then
        # free_fit itself searches on.
        rank = None
        candidates = cluster.free_bits & pipeline.slot_bits
        if candidates:
            rank = pipeline.rank_by_slot[cluster.slot_of_bit[(candidates & -candidates).bit_length() - 1]]
            if reserved or rank.retry_after_s > now or planner.unusable(pipeline):
                rank = planner.free_fit(pipeline)
        if rank is not None:
            ledger.expand(rank)
        elif not (
            # The margin (and in move_one_to the no-reversal interval) keeps ranks from moving
            # back and forth for marginal gains; a first bundle is not one, and it comes first.
            (pipeline.num_active_gpus == 0 or pipeline.num_active_gpus + pipeline.tp * stickiness <= target)
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


def fill_free(sched: Scheduler, rollers: list[PipelineState], planner: RoundPlanner | None = None) -> bool:
    """Lend every free bundle a rolling pipeline can use, most under-served pipeline first.
    Returns whether anything was lent."""
    if not sched.cluster.free_bits:
        return False
    planner = planner or RoundPlanner(sched)
    ledger = sched.ledger
    keep_tail = sched.config.keep_busy_tail
    # Those with surely nothing to take are left out first: on a pool of hundreds of jobs the
    # free GPUs are often kept for owners about to return, from every roller.
    order = sorted(
        (p for p in rollers if p.demand > 0 and not (keep_tail and p.in_tail) and not planner.nothing_free_for(p)),
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
    return min(max(pipeline.demand * (pipeline.tp * pipeline.split_weight), 1e-300), 1e300)
