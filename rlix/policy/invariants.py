"""The invariant checker, run on the core's state after a decision round.

Ownership is recomputed from the holders themselves, not from the core's indexes, so a
bookkeeping bug cannot hide itself; likewise the rollout budget, the reservations (who waits
on whom) and who may donate are recomputed here from the pipelines, the queue and the config,
not taken from the planner. Each policy is held to the invariants it guarantees
(`Policy.guarantees`). Invariants 7 (for consumed trajectories) and 8 are about a finished run
and live in `rlix.policy.run_checks`; invariant 10 (liveness) is a property of whole runs and
is tested by driving workloads to completion.

Use `InvariantChecker(sched).after_round(event, decisions)` after every `handle` (the scheduler
does this itself with `check_invariants=True`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rlix.policy import events as ev
from rlix.policy.decisions import AllowRollout, Decision, Expand, Grant, Revoke, Shrink
from rlix.policy.errors import InvariantViolation
from rlix.policy.invariants_loans import check_away_set, check_reclaims, check_warm, kept_homes
from rlix.policy.specs import TOTAL_KEY
from rlix.policy.state import ClusterHold, HoldStatus, Rank, RankStatus, Request

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler
    from rlix.policy.state import PipelineState


def _fail(number: int, detail: str) -> None:
    raise InvariantViolation(number, detail)


class InvariantChecker:
    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        self._holdings = self._snapshot()

    def _snapshot(self) -> dict[tuple[str, str], tuple[int, HoldStatus]]:
        """Each holding by its grant's decision id (never reused, unlike an object's id())."""
        return {
            (p.pipeline_id, name): (hold.decision_id, hold.status)
            for p in self.sched.pipelines.values()
            for name, hold in p.holdings.items()
        }

    def after_round(self, event: ev.Event, decisions: list[Decision]) -> None:
        sched = self.sched
        guarantees = sched.policy.guarantees
        check_ownership(sched)  # 1 and 2 hold for every policy
        self._check_holdings_kept(event, decisions)  # 3 and 9
        check_shrink_reasons(decisions, strict=4 in guarantees)
        check_reclaims(sched, decisions)
        check_away_set(sched)
        check_warm(sched)
        check_shrink_backoff(sched, decisions)
        check_drains(sched, decisions)
        if 5 in guarantees or 6 in guarantees:
            view = ReservationView(sched, decisions)
            if 5 in guarantees:
                check_no_overtaking(sched, decisions, view)
            if 6 in guarantees:
                check_split(sched, view)
                check_rebalance_keeps_targets(sched, decisions)
        check_pacing(sched, decisions)
        self._holdings = self._snapshot()

    def _check_holdings_kept(self, event: ev.Event, decisions: list[Decision]) -> None:
        now = self._snapshot()
        revoked = {(d.pipeline_id, d.cluster) for d in decisions if isinstance(d, Revoke) and d.dp_rank < 0}
        for key, (decision_id, status) in self._holdings.items():
            if key in now and now[key][0] == decision_id:
                continue
            pipeline_id, cluster = key
            if isinstance(event, ev.PipelineRemoved) and event.pipeline_id == pipeline_id:
                continue
            if isinstance(event, ev.ClusterReleased | ev.ClusterReleasedAndRequested) and event.pipeline_id == pipeline_id:
                released = event.cluster if isinstance(event, ev.ClusterReleased) else event.released
                if released == cluster:
                    continue
            if isinstance(event, ev.DecisionFailed) and status is HoldStatus.GRANTING:
                continue  # a grant not yet applied failed (or a shrink it required did): rolled back
            if key in revoked and isinstance(event, ev.GpuLost):
                continue
            number = 9 if isinstance(event, ev.PipelineRemoved) else 3
            _fail(number, f"non-rollout holding {pipeline_id}/{cluster} disappeared on {type(event).__name__}")
        if isinstance(event, ev.PipelineRemoved):
            for gpu, holder in enumerate(self.sched.cluster.owner):
                if holder is not None and holder.pipeline_id == event.pipeline_id:
                    _fail(9, f"GPU {gpu} still held by removed pipeline {event.pipeline_id}")


def check_ownership(sched: Scheduler) -> None:
    """Invariants 1 and 2: one holder per GPU, exact gang and bundle shapes, index consistency."""
    cluster = sched.cluster
    topology = sched.topology
    expected: list[ClusterHold | Rank | None] = [None] * topology.num_gpus
    for pipeline in sched.pipelines.values():
        spec = pipeline.spec
        holders: list[ClusterHold | Rank] = list(pipeline.holdings.values())
        for name, hold in pipeline.holdings.items():
            if hold.gpus != spec.clusters[name].mapping:
                _fail(2, f"{pipeline.pipeline_id}/{name} holds {hold.gpus}, not its mapping")
        for rank in pipeline.ranks:
            active = rank.status is not RankStatus.INACTIVE
            if active != (pipeline.active.get(rank.dp_rank) is rank):
                _fail(1, f"{pipeline.pipeline_id} rank {rank.dp_rank}: active index out of date")
            if rank.gpus != spec.rollout.bundle(rank.dp_rank):
                _fail(2, f"{pipeline.pipeline_id} rank {rank.dp_rank} is not on its bundle")
            if len({topology.node_of(g) for g in rank.gpus}) != 1:
                _fail(2, f"{pipeline.pipeline_id} rank {rank.dp_rank} spans nodes")
            if active:
                holders.append(rank)
        active_gpus = sum(len(r.gpus) for r in pipeline.active.values())
        if active_gpus != pipeline.num_active_gpus:
            _fail(1, f"{pipeline.pipeline_id}: counted {pipeline.num_active_gpus} rollout GPUs, holds {active_gpus}")
        busy_active = len(pipeline.active.keys() & pipeline.busy)
        if busy_active != pipeline.num_busy_active:
            _fail(1, f"{pipeline.pipeline_id}: counted {pipeline.num_busy_active} busy active ranks, has {busy_active}")
        for holder in holders:
            for gpu in holder.gpus:
                if expected[gpu] is not None:
                    _fail(1, f"GPU {gpu} has two holders")
                expected[gpu] = holder
    for gpu, expected_holder in enumerate(expected):
        if cluster.owner[gpu] is not expected_holder:
            _fail(1, f"GPU {gpu}: owner index disagrees with the holders")
        if expected_holder is not None and gpu in cluster.offline:
            _fail(1, f"lost GPU {gpu} is still held")
    num_free = sum(1 for g in range(topology.num_gpus) if expected[g] is None and g not in cluster.offline)
    if num_free != cluster.num_free:
        _fail(1, f"free count {cluster.num_free} != {num_free}")
    for slot, gpus in enumerate(cluster.slot_gpus):
        free = all(expected[g] is None and g not in cluster.offline for g in gpus)
        if free != (cluster.slot_num_busy[slot] == 0) or free != bool(cluster.free_bits & cluster.slot_mask[slot]):
            _fail(1, f"free-slot index wrong for bundle {gpus}")


def check_shrink_reasons(decisions: list[Decision], strict: bool) -> None:
    """Invariants 3 and 4: rollout is shrunk only for a grant or an expansion of this round,
    or because its pipeline stopped rolling out."""
    required_by_grants = {r for d in decisions if isinstance(d, Grant) for r in d.requires}
    required_by_expands = {r for d in decisions if isinstance(d, Expand) for r in d.requires}
    for d in decisions:
        if not isinstance(d, Shrink):
            continue
        if d.reason not in ("preempt", "rebalance", "release", "reclaim"):
            _fail(3, f"shrink {d.decision_id} has unknown reason {d.reason!r}")
        if not strict:
            continue
        if d.reason == "preempt" and d.decision_id not in required_by_grants:
            _fail(4, f"preempting shrink {d.decision_id} is not followed by its grant")
        if d.reason == "rebalance" and d.decision_id not in required_by_expands:
            _fail(4, f"rebalancing shrink {d.decision_id} is not followed by an expansion")


def check_drains(sched: Scheduler, decisions: list[Decision]) -> None:
    """Invariant 5 (the bound of a drain): a rank drains only when cut for another pipeline's
    grant, only on GPUs of its own pipeline's home (a loan is handed back at once), and for at
    most `max_drain_s`, so the grant waits a bounded time for it."""
    bound = sched.config.max_drain_s
    granted_to = {needed: g.pipeline_id for g in decisions if isinstance(g, Grant) for needed in g.requires}
    for d in decisions:
        if isinstance(d, Shrink) and d.drain_s:
            if granted_to.get(d.decision_id) == d.pipeline_id:
                _fail(5, f"shrink {d.decision_id} drains {d.pipeline_id}'s rank for its own grant")
            if d.reason != "preempt":
                _fail(5, f"shrink {d.decision_id} ({d.reason}) drains; only a rank cut for a grant may")
            if not 0 < d.drain_s <= bound:
                _fail(5, f"shrink {d.decision_id} drains {d.drain_s!r} s, past the bound of {bound!r} s")
            pipeline = sched.pipelines.get(d.pipeline_id)
            home = frozenset(pipeline.spec.home) if pipeline is not None else frozenset()
            if any(g not in home for g in d.gpus):
                _fail(5, f"shrink {d.decision_id} drains {d.pipeline_id}'s rank on GPUs {list(d.gpus)}, "
                         "not all of its home: a loan is cut at once")


def check_shrink_backoff(sched: Scheduler, decisions: list[Decision]) -> None:
    """Invariant 3 (retry side): a rank whose last Shrink failed is not shrunk again before
    `retry_backoff_s` has passed."""
    for d in decisions:
        if isinstance(d, Shrink):
            pipeline = sched.pipelines.get(d.pipeline_id)
            if pipeline is not None and pipeline.ranks[d.dp_rank].shrink_retry_after_s > sched.now:
                _fail(3, f"{d.pipeline_id} rank {d.dp_rank} shrunk again while backing off a failed shrink")


class ReservationView:
    """The reservations of the round as the contract defines them, worked out from the queue:
    every runnable request still queued after the round was blocked and, unless a GPU of its
    mapping is lost, reserved its mapping; each GPU belongs to the first such request wanting
    it. A request's reservation does not block the pipelines it waits on, nor those the first
    reserving request waits on (see rlix.policy.admission)."""

    def __init__(self, sched: Scheduler, decisions: list[Decision]) -> None:
        self.sched = sched
        self.granted_now = {d.decision_id for d in decisions if isinstance(d, Grant)}
        offline = sched.cluster.offline
        self.reserving: list[Request] = [
            r for r in sched.queue
            if r.pipeline_id in sched.runnable and offline.isdisjoint(self._mapping(r))
        ]
        self.first_for: dict[int, Request] = {}
        for request in self.reserving:
            for gpu in self._mapping(request):
                self.first_for.setdefault(gpu, request)
        self._waits: dict[int, frozenset[str]] = {}

    def _mapping(self, request: Request) -> tuple[int, ...]:
        return self.sched.pipelines[request.pipeline_id].spec.clusters[request.cluster].mapping

    def waits_on(self, request: Request) -> frozenset[str]:
        """Pipelines whose holdings block the request, grown to a fixed point by the holders
        blocking those pipelines' own pending requests. Holdings granted this round after the
        request (in service order) did not exist when it was served."""
        found = self._waits.get(request.seq)
        if found is not None:
            return found
        owner = self.sched.cluster.owner
        order = (request.priority, request.seq)

        def holders(mapping: tuple[int, ...]) -> set[str]:
            return {
                h.pipeline_id for g in mapping
                if isinstance(h := owner[g], ClusterHold)
                and (h.decision_id not in self.granted_now or (h.request.priority, h.request.seq) < order)
            }

        result = holders(self._mapping(request))
        while True:
            grown = set(result)
            for pipeline_id in result:
                for pending in self.sched.pipelines[pipeline_id].pending.values():
                    grown |= holders(self._mapping(pending))
            if grown == result:
                break
            result = grown
        self._waits[request.seq] = frozenset(result)
        return self._waits[request.seq]

    def exempt(self, request: Request, pipeline_id: str) -> bool:
        return pipeline_id in self.waits_on(request) or pipeline_id in self.waits_on(self.reserving[0])

    def blocks(self, gpu: int, pipeline_id: str) -> bool:
        request = self.first_for.get(gpu)
        return request is not None and not self.exempt(request, pipeline_id)


def check_no_overtaking(sched: Scheduler, decisions: list[Decision], view: ReservationView | None = None) -> None:
    """Invariant 5: a GPU wanted by a blocked request that reserves goes, this round, to no
    later request and to no rollout, unless the taker is a pipeline the request (or the oldest
    reserving request) waits on: it must be able to move on for that request to be served."""
    view = view or ReservationView(sched, decisions)
    for d in decisions:
        if isinstance(d, Grant):
            hold = sched.pipelines[d.pipeline_id].holdings.get(d.cluster)
            order = (d.priority, hold.request.seq if hold is not None else -1)
        elif isinstance(d, Expand):
            order = (7, 0)
        else:
            continue
        for gpu in d.gpus:
            request = view.first_for.get(gpu)
            if request is None or order <= (request.priority, request.seq):
                continue
            if not view.exempt(request, d.pipeline_id):
                _fail(5, f"{d.pipeline_id} was given GPU {gpu} that the older blocked request "
                         f"{request.pipeline_id}/{request.cluster} needs")


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
    budget = _rollout_budget(sched, rollers, view)
    if sum(targets.get(p.pipeline_id, 0) for p in rollers) > budget:
        _fail(6, f"targets {targets} sum past the budget {budget}")
    for p in rollers:
        work = _work_left(p)
        if not math.isclose(p.demand, work, rel_tol=1e-9, abs_tol=1e-9):
            _fail(6, f"{p.pipeline_id}: counted {p.demand} rollout work left, its reports give {work}")
    demanding = [p for p in rollers if p.demand > 0]
    if sum(p.tp for p in demanding) <= budget:
        for p in demanding:
            if targets.get(p.pipeline_id, 0) < p.tp:
                _fail(6, f"{p.pipeline_id} has demand but no bundle in its target")
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


def check_pacing(sched: Scheduler, decisions: list[Decision]) -> None:
    """Invariant 7 (pacing side): rollout is never allowed past version + max_staleness."""
    for d in decisions:
        if isinstance(d, AllowRollout):
            pipeline = sched.pipelines.get(d.pipeline_id)
            if pipeline is None:
                continue
            bound = pipeline.versions[d.adapter] + pipeline.spec.staleness_of(d.adapter)
            if d.max_step > bound:
                _fail(7, f"{d.pipeline_id}/{d.adapter} allowed to step {d.max_step} past {bound}")
