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

from typing import TYPE_CHECKING

from rlix.policy import events as ev
from rlix.policy.decisions import AllowRollout, Decision, Expand, Grant, Revoke, Shrink
from rlix.policy.errors import InvariantViolation
from rlix.policy.invariants_loans import check_away_set, check_reclaims, check_warm
from rlix.policy.invariants_reservations import ReservationView, check_no_overtaking
from rlix.policy.invariants_split import check_rebalance_keeps_targets, check_split
from rlix.policy.state import ClusterHold, HoldStatus, Rank, RankStatus

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler


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
