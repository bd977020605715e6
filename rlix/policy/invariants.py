"""The invariant checker, run on the core's state after a decision round.

Ownership is recomputed from the holders themselves, not from the core's indexes, so a
bookkeeping bug cannot hide itself; the split check shares only the rollout budget's
definition with the planner (`rlix.policy.rollout.rollout_budget`). Each policy is held to the invariants it guarantees
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
from rlix.policy.state import ClusterHold, Rank, RankStatus

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler


def _fail(number: int, detail: str) -> None:
    raise InvariantViolation(number, detail)


class InvariantChecker:
    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        self._holdings = self._snapshot()

    def _snapshot(self) -> dict[tuple[str, str], int]:
        return {
            (p.pipeline_id, name): id(hold)
            for p in self.sched.pipelines.values()
            for name, hold in p.holdings.items()
        }

    def after_round(self, event: ev.Event, decisions: list[Decision]) -> None:
        guarantees = self.sched.policy.guarantees
        check_ownership(self.sched)  # 1 and 2 hold for every policy
        self._check_holdings_kept(event, decisions)  # 3 and 9
        check_shrink_reasons(decisions, strict=4 in guarantees)
        if 5 in guarantees:
            check_no_overtaking(self.sched, decisions)
        if 6 in guarantees:
            check_split(self.sched)
        check_pacing(self.sched, decisions)
        self._holdings = self._snapshot()

    def _check_holdings_kept(self, event: ev.Event, decisions: list[Decision]) -> None:
        now = self._snapshot()
        revoked = {(d.pipeline_id, d.cluster) for d in decisions if isinstance(d, Revoke) and d.dp_rank < 0}
        for key, ident in self._holdings.items():
            if now.get(key) == ident:
                continue
            pipeline_id, cluster = key
            if isinstance(event, ev.PipelineRemoved) and event.pipeline_id == pipeline_id:
                continue
            if isinstance(event, ev.ClusterReleased | ev.ClusterReleasedAndRequested) and event.pipeline_id == pipeline_id:
                released = event.cluster if isinstance(event, ev.ClusterReleased) else event.released
                if released == cluster:
                    continue
            if isinstance(event, ev.DecisionFailed) and key not in now:
                continue  # a grant that failed was rolled back
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
        if d.reason not in ("preempt", "rebalance", "release"):
            _fail(3, f"shrink {d.decision_id} has unknown reason {d.reason!r}")
        if not strict:
            continue
        if d.reason == "preempt" and d.decision_id not in required_by_grants:
            _fail(4, f"preempting shrink {d.decision_id} is not followed by its grant")
        if d.reason == "rebalance" and d.decision_id not in required_by_expands:
            _fail(4, f"rebalancing shrink {d.decision_id} is not followed by an expansion")


def check_no_overtaking(sched: Scheduler, decisions: list[Decision]) -> None:
    """Invariant 5: a GPU wanted by blocked requests goes, this round, to no later request and
    to no rollout, unless the taker's holdings block the oldest of those requests (it must be
    able to move on for that request to be served)."""
    given: list[tuple[tuple[int, int], str, tuple[int, ...]]] = []
    for d in decisions:
        if isinstance(d, Grant):
            hold = sched.pipelines[d.pipeline_id].holdings.get(d.cluster)
            seq = hold.request.seq if hold is not None else -1
            given.append(((d.priority, seq), d.pipeline_id, d.gpus))
        elif isinstance(d, Expand):
            given.append(((7, 0), d.pipeline_id, d.gpus))
    if not given:
        return
    granted_now = {d.decision_id for d in decisions if isinstance(d, Grant)}
    oldest: dict[int, tuple[tuple[int, int], str, frozenset[str]]] = {}
    for request in sched.queue:  # in service order: the first to want a GPU is the oldest
        if request.pipeline_id not in sched.runnable:
            continue
        mapping = sched.pipelines[request.pipeline_id].spec.clusters[request.cluster].mapping
        order = (request.priority, request.seq)
        # A holder granted this round after the request (in service order) cannot excuse itself.
        blockers = frozenset(
            h.pipeline_id for g in mapping
            if isinstance(h := sched.cluster.owner[g], ClusterHold)
            and (h.decision_id not in granted_now or (h.request.priority, h.request.seq) < order)
        )
        for gpu in mapping:
            oldest.setdefault(gpu, (order, f"{request.pipeline_id}/{request.cluster}", blockers))
    for order, pipeline_id, gpus in given:
        for gpu in gpus:
            if gpu not in oldest:
                continue
            request_order, who, blockers = oldest[gpu]
            if order > request_order and pipeline_id not in blockers:
                _fail(5, f"{pipeline_id} was given GPU {gpu} that the older blocked request {who} needs")


def check_split(sched: Scheduler) -> None:
    """Invariant 6: targets fit the GPUs rollout may use, and no pipeline short of its target by
    a whole bundle has a bundle it could take (free, or held by pipelines above target)."""
    from rlix.policy.rollout import is_donor, may_receive, rollout_budget

    rollers = sched.rolling_pipelines()
    targets = sched.targets
    budget = rollout_budget(sched, rollers)
    if sum(targets.get(p.pipeline_id, 0) for p in rollers) > budget:
        _fail(6, f"targets {targets} sum past the budget {budget}")
    demanding = [p for p in rollers if p.demand > 0]
    if sum(p.tp for p in demanding) <= budget:
        for p in demanding:
            if targets.get(p.pipeline_id, 0) < p.tp:
                _fail(6, f"{p.pipeline_id} has demand but no bundle in its target")
    over = {p.pipeline_id for p in rollers if is_donor(sched, p)}
    margin = sched.config.rebalance_margin_bundles
    for p in rollers:
        if p.num_active_gpus + p.tp > targets.get(p.pipeline_id, 0):
            continue
        may_take_donor = (
            p.num_active_gpus + p.tp * (1 + margin) <= targets.get(p.pipeline_id, 0)
            and may_receive(sched, p)
        )
        for rank in p.ranks:
            if rank.status is not RankStatus.INACTIVE or rank.retry_after_s > sched.now:
                continue
            if _takeable(sched, rank, p.pipeline_id, over if may_take_donor else set()):
                _fail(6, f"{p.pipeline_id} is short of its target {targets[p.pipeline_id]} "
                         f"(holds {p.num_active_gpus}) yet could take rank {rank.dp_rank}")


def _takeable(sched: Scheduler, rank: Rank, pipeline_id: str, donors: set[str]) -> bool:
    cluster = sched.cluster
    for gpu in rank.gpus:
        if gpu in cluster.offline or sched.reservations.blocks(gpu, pipeline_id):
            return False
        holder = cluster.owner[gpu]
        if holder is None:
            continue
        if not isinstance(holder, Rank) or holder.status is not RankStatus.ACTIVE:
            return False
        if holder.pipeline_id not in donors:
            return False
    return True


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
