"""Invariant 6, the rollout split, checked from the pipelines, the queue and the config.

Part of `rlix.policy.invariants`. The rollout budget, who may donate and what each pipeline
could take are recomputed here (`_rollout_budget`, `_takeable`), not taken from the planner
(`rlix.policy.rollout`, `rlix.policy.donors`): a checker that called the planner would share
its bugs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from rlix.policy.decisions import Decision, Expand, Shrink
from rlix.policy.errors import InvariantViolation
from rlix.policy.invariants_loans import kept_homes
from rlix.policy.invariants_reservations import ReservationView
from rlix.policy.specs import TOTAL_KEY
from rlix.policy.state import Rank, RankStatus

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler
    from rlix.policy.state import PipelineState


def _fail(number: int, detail: str) -> None:
    raise InvariantViolation(number, detail)


def _rollout_budget(sched: Scheduler, rollers: list[PipelineState], view: ReservationView) -> int:
    """GPUs of the rollers' mappings neither lost, nor under a non-rollout holding, nor reserved."""
    union = {g for p in rollers for g in p.spec.rollout.mapping}
    held = {g for p in sched.pipelines.values() for h in p.holdings.values() for g in h.gpus}
    return sum(1 for g in union if g not in sched.cluster.offline and g not in held and g not in view.first_for)


def _work_left(pipeline: PipelineState) -> float:
    """A rolling pipeline's work left, adapter by adapter: its last report, or a share of the
    last pipeline-wide total (or else of the estimate) for an adapter that has not reported."""
    reports = pipeline.remaining
    if TOTAL_KEY in reports:
        return reports[TOTAL_KEY]
    adapters = pipeline.spec.adapter_names
    baseline = pipeline.estimate if pipeline.reported_total is None else pipeline.reported_total
    return sum(reports[a] if a in reports else baseline / len(adapters) for a in adapters)


def _check_targets(targets: Mapping[str, int], rollers: Sequence[PipelineState], budget: int) -> None:
    """Invariant 6's targets: they fit the budget, each pipeline's demand is the rollout work
    its reports leave, and where every demanding pipeline's bundle fits, each has one."""
    if sum(targets.get(p.pipeline_id, 0) for p in rollers) > budget:
        _fail(6, f"targets {dict(targets)} sum past the budget {budget}")
    for p in rollers:
        work = _work_left(p)
        if not math.isclose(p.demand, work, rel_tol=1e-9, abs_tol=1e-9):
            _fail(6, f"{p.pipeline_id}: counted {p.demand} rollout work left, its reports give {work}")
    demanding = [p for p in rollers if p.demand > 0]
    if sum(p.tp for p in demanding) <= budget:
        for p in demanding:
            if targets.get(p.pipeline_id, 0) < p.tp:
                _fail(6, f"{p.pipeline_id} has demand but no bundle in its target")


def check_split(sched: Scheduler, view: ReservationView | None = None) -> None:
    """Invariant 6: targets fit the GPUs rollout may use, and no pipeline short of its target by
    a whole bundle has a bundle it could take: free, or held by donors (above target, not given
    ranks by a rebalance within `min_rebalance_interval_s`) without taking any donor below its
    target. Taking from donors is due once the shortfall passes the margin (at once for a
    first bundle) and the pipeline did not itself donate within the interval; for a first
    bundle, donors given ranks by a recent rebalance donate too. With look-ahead, a pipeline
    past the margin also takes its own home back from any pipeline above target, whatever
    either did within the interval, and a bundle on a home look-ahead keeps from loans need
    not be taken (for a first bundle, only one on the home of an away owner)."""
    view = view or ReservationView(sched, [])
    rollers = sched.rolling_pipelines()
    targets = sched.targets
    config = sched.config
    _check_targets(targets, rollers, _rollout_budget(sched, rollers, view))
    holds = {p.pipeline_id: sum(len(r.gpus) for r in p.ranks if r.status is not RankStatus.INACTIVE) for p in rollers}
    above = {
        p.pipeline_id: holds[p.pipeline_id] - targets.get(p.pipeline_id, 0)
        for p in rollers
        if holds[p.pipeline_id] > targets.get(p.pipeline_id, 0)
    }
    settled = {  # not given ranks by a rebalance within the interval
        pid: excess for pid, excess in above.items()
        if sched.now >= sched.pipelines[pid].last_rebalanced_in_s + config.min_rebalance_interval_s
    }
    look_ahead = config.look_ahead and sched.policy.name == "rlix"
    kept_any = kept_homes(sched) if look_ahead else {}
    # A first bundle may be kept off an away owner's home only (one whose loans rule 2 may be
    # reclaiming already: lent there, it would be shrunk once loaded), not off rule 4's homes.
    kept_away = kept_homes(sched, away_only=True) if look_ahead else {}
    for p in rollers:
        held, target = holds[p.pipeline_id], targets.get(p.pipeline_id, 0)
        if held + p.tp > target:
            continue
        past_margin = held + p.tp * (1 + config.rebalance_margin_bundles) <= target
        if held == 0:
            donors = above  # a first bundle: no margin, no interval
        elif past_margin and sched.now >= p.last_rebalanced_out_s + config.min_rebalance_interval_s:
            donors = settled
        else:
            donors = {}
        kept = kept_any if held else kept_away
        # Look-ahead rule 3: on its own home (GPUs no other home covers), an owner past the
        # margin takes from any pipeline above target, a recent rebalance or none.
        own = _own_home(sched, p) if held and look_ahead and past_margin else set()
        for rank in p.ranks:
            if rank.status is not RankStatus.INACTIVE or rank.retry_after_s > sched.now:
                continue
            if kept and any(kept.get(g, p.pipeline_id) != p.pipeline_id for g in rank.gpus):
                continue  # look-ahead may keep an own home from loans (rules 1 and 4)
            takers = above if own and own.issuperset(rank.gpus) else donors
            if _takeable(sched, view, rank, p.pipeline_id, takers):
                _fail(6, f"{p.pipeline_id} is short of its target {target} "
                         f"(holds {held}) yet could take rank {rank.dp_rank}")


def _own_home(sched: Scheduler, pipeline: PipelineState) -> set[int]:
    """The GPUs of the pipeline's home that no other registered pipeline's home covers."""
    others = {g for q in sched.pipelines.values() if q is not pipeline for g in q.spec.home}
    return set(pipeline.spec.home) - others


def _takeable(sched: Scheduler, view: ReservationView, rank: Rank, pipeline_id: str, excess: dict[str, int]) -> bool:
    cluster = sched.cluster
    loss: dict[str, int] = {}
    counted: set[int] = set()
    for gpu in rank.gpus:
        if gpu in cluster.offline or view.blocks(gpu, pipeline_id):
            return False
        holder = cluster.owner[gpu]
        if holder is None:
            continue
        if not isinstance(holder, Rank) or holder.status is not RankStatus.ACTIVE:
            return False
        if holder.pipeline_id not in excess or holder.shrink_retry_after_s > sched.now:
            return False
        if sched.config.keep_busy_tail and _busy_in_tail(sched, holder):
            return False
        if id(holder) not in counted:
            counted.add(id(holder))
            loss[holder.pipeline_id] = loss.get(holder.pipeline_id, 0) + len(holder.gpus)
    return all(lost <= excess[pid] for pid, lost in loss.items())


def _busy_in_tail(sched: Scheduler, rank: Rank) -> bool:
    """The rank runs trajectories of a pipeline with nothing queued, by its last report: a
    rebalance leaves it be (PolicyConfig.keep_busy_tail), unless the finish rule weighs the
    pipeline by its time left and its tails are long (its state says so: `tail_held`)."""
    pipeline = sched.pipelines[rank.pipeline_id]
    report = pipeline.in_flight
    return bool(
        pipeline.tail_held and pipeline.rolling and report is not None and pipeline.queued == 0
        and report.get(rank.dp_rank, 0)
    )


def check_rebalance_keeps_targets(sched: Scheduler, decisions: list[Decision]) -> None:
    """Invariant 6 (donor side): a rebalance never takes a pipeline below its own target, nor
    one that was already below it lower. What a pipeline held before the round's rebalances is
    what it holds now, plus what they shrank, less what the round expanded: preemptions for
    requests come first in a round and are not the rebalance's doing (a pipeline preempted
    below its target may still have a rank relocated for another's first bundle, as long as it
    is made whole again)."""
    moved: dict[str, int] = {}
    donors: set[str] = set()
    for d in decisions:
        if isinstance(d, Shrink):
            if d.reason == "rebalance":
                moved[d.pipeline_id] = moved.get(d.pipeline_id, 0) + len(d.gpus)
                donors.add(d.pipeline_id)
        elif isinstance(d, Expand):
            moved[d.pipeline_id] = moved.get(d.pipeline_id, 0) - len(d.gpus)
    for pipeline_id in sorted(donors):
        pipeline = sched.pipelines[pipeline_id]
        if not pipeline.rolling:
            continue
        held = sum(len(r.gpus) for r in pipeline.ranks if r.status is not RankStatus.INACTIVE)
        target = sched.targets.get(pipeline_id, 0)
        if held < min(target, held + moved[pipeline_id]):
            _fail(6, f"a rebalance took {pipeline_id} from {held + moved[pipeline_id]} to {held} GPUs, "
                     f"below its target {target}")
