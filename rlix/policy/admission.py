"""Serving non-rollout requests (priorities 0-5): gang grants, preemption, reservation.

Requests are served by priority, then arrival. A request needs its cluster's whole mapping.
For each GPU of the mapping the core asks who is on it:

- nobody (or a rollout rank whose Shrink is in flight): usable now;
- an active rollout rank: usable after shrinking that rank;
- a rank whose Expand is in flight, a non-rollout holder, a lost GPU, or a GPU reserved for an
  older blocked request: the request is blocked.

A request that is not blocked shrinks the ranks in its way and is granted in the same round,
so a shrink never happens for nothing. A blocked request shrinks nothing (policies with
`futile_preemption`, the RLix model, shrink anyway) and, under policies with `reserve_blocked`,
reserves its mapping: GPUs in it are not handed to any later request or to rollout until it is
granted. Pipelines whose non-rollout holdings block the request are exempt from its reservation,
because the request cannot be served until they move on; that keeps hold-and-wait pipelines
from deadlocking against a reservation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rlix.policy.state import ClusterHold, Rank, RankStatus, Request

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler
    from rlix.policy.policies import Policy


@dataclass(slots=True)
class Reservations:
    """GPUs reserved for blocked requests in this round, and who is exempt from each."""

    reserved_for: dict[int, Request] = field(default_factory=dict)
    exempt: dict[int, frozenset[str]] = field(default_factory=dict)  # keyed by request seq

    def blocks(self, gpu: int, pipeline_id: str) -> bool:
        request = self.reserved_for.get(gpu)
        return request is not None and pipeline_id not in self.exempt[request.seq]

    def reserve(self, request: Request, gpus: tuple[int, ...], exempt: frozenset[str]) -> None:
        self.exempt[request.seq] = exempt
        for gpu in gpus:
            self.reserved_for.setdefault(gpu, request)


@dataclass(slots=True)
class Assessment:
    """What stands between a request and its mapping."""

    to_shrink: dict[int, Rank] = field(default_factory=dict)  # keyed by id(rank), in GPU order
    blockers: set[str] = field(default_factory=set)  # pipelines with non-rollout holdings in the way
    reason: str = ""


def assess(sched: Scheduler, request: Request, gpus: tuple[int, ...], reservations: Reservations) -> Assessment:
    result = Assessment()
    cluster = sched.cluster
    for gpu in gpus:
        if gpu in cluster.offline:
            result.reason = result.reason or f"GPU {gpu} is lost"
            continue
        if reservations.blocks(gpu, request.pipeline_id):
            older = reservations.reserved_for[gpu]
            result.reason = result.reason or f"GPU {gpu} is reserved for {older.pipeline_id}/{older.cluster}"
            continue
        holder = cluster.owner[gpu]
        if holder is None:
            continue
        if isinstance(holder, ClusterHold):
            result.blockers.add(holder.pipeline_id)
            result.reason = result.reason or f"GPU {gpu} is held by {holder.pipeline_id}/{holder.cluster}"
        elif holder.status is RankStatus.ACTIVE:
            result.to_shrink[id(holder)] = holder
        else:
            result.reason = result.reason or f"GPU {gpu} is being loaded by {holder.pipeline_id} rank {holder.dp_rank}"
    return result


def serve_requests(sched: Scheduler, policy: Policy) -> Reservations:
    reservations = Reservations()
    ledger = sched.ledger
    for request in list(sched.queue):
        if request.pipeline_id not in sched.runnable:
            ledger.hold(request, f"waiting for its turn under the {policy.name} policy")
            continue
        gpus = sched.pipelines[request.pipeline_id].spec.clusters[request.cluster].mapping
        verdict = assess(sched, request, gpus, reservations)
        backing_off = request.retry_after_s > sched.now
        if not verdict.reason and not backing_off:
            shrinks = [ledger.shrink(rank, "preempt").decision_id for rank in verdict.to_shrink.values()]
            ledger.grant(request, gpus, shrinks)
            continue
        if policy.futile_preemption and not backing_off:
            for rank in verdict.to_shrink.values():
                ledger.shrink(rank, "preempt")
        if policy.reserve_blocked:
            reservations.reserve(request, gpus, frozenset(verdict.blockers))
        ledger.hold(request, verdict.reason or "backing off after a failed grant")
    return reservations
