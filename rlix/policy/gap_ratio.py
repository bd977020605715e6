"""A faithful model of RLix's "gap ratio" rollout split (see shared/REFERENCE.md).

Kept as it is, weak points included, so that rlix can be compared against it:
targets are not normalised (they may sum past the budget), every eligible pipeline gets one
bundle even with zero demand, a pipeline that has not started adds its estimate to its demand,
and the planner rescans every rank of every acceptor after each single activation, so its cost
grows with GPUs x pipelines x activations.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rlix.policy.state import ClusterHold, PipelineState, Rank, RankStatus

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler


def _round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


def _demand(pipeline: PipelineState) -> float:
    demand = pipeline.demand
    if pipeline.num_active_gpus == 0:
        demand += pipeline.estimate  # a pending request adds T_p
    return demand


def plan_gap_ratio(sched: Scheduler) -> None:
    rollers = sched.rolling_pipelines()
    if not rollers:
        sched.targets, sched.ideal = {}, {}
        return
    cluster = sched.cluster
    budget = cluster.num_free + sum(
        len(h.gpus) for p in sched.pipelines.values() for h in p.active.values()
    )
    demand = {p.pipeline_id: _demand(p) for p in rollers}
    total = sum(demand[p.pipeline_id] * p.tp for p in rollers)
    ratio = {p.pipeline_id: (demand[p.pipeline_id] * p.tp / total if total > 0 else 0.0) for p in rollers}
    targets = {
        p.pipeline_id: max(_round_half_up(ratio[p.pipeline_id] * budget / p.tp) * p.tp, p.tp)
        for p in rollers
    }
    sched.targets = targets
    sched.ideal = {pid: r * budget for pid, r in ratio.items()}
    if budget == 0:
        return
    touched: set[int] = set()
    while _activate_one(sched, rollers, ratio, targets, demand, budget, touched):
        pass


def _gap(p: PipelineState, ratio: dict[str, float], budget: int) -> float:
    return ratio[p.pipeline_id] - p.num_active_gpus / budget


def _activate_one(
    sched: Scheduler,
    rollers: list[PipelineState],
    ratio: dict[str, float],
    targets: dict[str, int],
    demand: dict[str, float],
    budget: int,
    touched: set[int],
) -> bool:
    acceptors = [
        p for p in rollers
        if _gap(p, ratio, budget) > 0 and p.num_active_gpus < targets[p.pipeline_id]
    ]
    acceptors.sort(key=lambda p: (
        -_gap(p, ratio, budget) / ratio[p.pipeline_id], -_gap(p, ratio, budget), p.pipeline_id,
    ))
    donors = {
        p.pipeline_id: p for p in rollers
        if _gap(p, ratio, budget) < 0
        and len(p.active) - 1 >= max(1, targets[p.pipeline_id] // p.tp)
    }
    for acceptor in acceptors:
        best: tuple[tuple[bool, float, int], Rank, list[Rank]] | None = None
        for rank in acceptor.ranks:
            if rank.status is not RankStatus.INACTIVE or id(rank) in touched:
                continue
            if rank.retry_after_s > sched.now:
                continue
            victims = _victims(sched, rank, donors, touched)
            if victims is None:
                continue
            most_work = max((demand[v.pipeline_id] for v in victims), default=0.0)
            score = (bool(victims), -most_work, rank.dp_rank)
            if best is None or score < best[0]:
                best = (score, rank, victims)
        if best is None:
            continue
        _, rank, victims = best
        for victim in victims:
            sched.ledger.shrink(victim, "rebalance")
            touched.add(id(victim))
        sched.ledger.expand(rank)
        touched.add(id(rank))
        return True
    return False


def _victims(
    sched: Scheduler, rank: Rank, donors: dict[str, PipelineState], touched: set[int]
) -> list[Rank] | None:
    cluster = sched.cluster
    victims: dict[int, Rank] = {}
    for gpu in rank.gpus:
        if gpu in cluster.offline:
            return None
        holder = cluster.owner[gpu]
        if holder is None:
            continue
        if isinstance(holder, ClusterHold):
            return None  # the bundle must avoid non-rollout GPUs
        if holder.status is not RankStatus.ACTIVE or id(holder) in touched:
            return None
        if holder.pipeline_id not in donors:
            return None
        victims[id(holder)] = holder
    return list(victims.values())
