"""Serving non-rollout requests (priorities 0-5): gang grants, preemption, reservation.

Requests are served by priority, then arrival. A request needs its cluster's whole mapping.
For each GPU of the mapping the core asks who is on it:

- nobody (or a rollout rank whose Shrink is in flight): usable now;
- an active rollout rank: usable after shrinking that rank;
- a rank whose Expand is in flight, a rank whose last Shrink failed and is backing off, a
  non-rollout holder, a lost GPU, or a GPU reserved for an older blocked request: blocked.

A request that is not blocked shrinks the ranks in its way and is granted in the same round,
so a shrink never happens for nothing. A blocked request shrinks nothing (policies with
`futile_preemption`, the RLix model, shrink anyway) and, under policies with `reserve_blocked`,
reserves its mapping: GPUs in it are not handed to a later request or to rollout until it is
granted, except to the pipelines exempt from the reservation (below); a request backing off
after a failed grant reserves too, to keep its place. A request that waits for a lost GPU does
not reserve: it cannot be served until the GPU is back, however long that is, and holding the
rest of its mapping idle meanwhile would idle the pool for nothing.

Why reservations cannot deadlock hold-and-wait pipelines
--------------------------------------------------------
A pipeline may hold one cluster while it waits for another (B holds actor_train and asks for
its critic before releasing actor_train). Say request r *waits on* pipeline P when P holds a
GPU of r's mapping, or P is waited on by a pipeline that r waits on through one of that
pipeline's own pending requests (the transitive closure: r waits for P's holding, P will not
release it before its pending request q is granted, q waits for the holder of q's GPUs, ...).
Two rules:

1. A request's reservation never blocks a pipeline the request waits on (its reservation
   cannot keep away what it is waiting for).
2. The pipelines that the *oldest* reserving request (the first in service order: priority,
   then arrival) waits on are exempt from every reservation of the round, not only from
   that request's.

Rule 1 alone is not enough: two blocked requests can each reserve a GPU that the other's
chain needs (A waits on P, P's request needs a GPU D reserved; D waits on Q, Q's request needs
a GPU A reserved: a cycle through two reservations). Nor is the other natural rule, "a
request blocked only by reservations does not reserve": in that same example both A and D are
blocked by holders alone, so both reserve and the cycle stays.

Claim: with finite work, no failures, and holdings whose wait-for graph (P -> the holders of
the GPUs of P's pending requests) has no cycle of its own, some request is granted in every
stable state. Proof: let r1 be the oldest runnable request; nothing older reserves, so only
holders block it (in-flight Expands get applied, active ranks are shrunk). Follow the acyclic
wait-for graph from r1's holders to a pipeline S with no outgoing edge. S holds GPUs, so in a
stable state it waits (a pipeline that waits for nothing finishes its stage and releases), i.e.
it has a pending request q whose mapping no holder blocks. r1 waits on S, so by rule 2 no
reservation blocks q, and q is granted. Each grant is progress on finite work, and r1's GPUs go
only to pipelines it waits on, so r1 is served in the end: every pipeline finishes (invariant
10). A cycle in the holdings themselves (P holds what Q asks for and Q what P asks for) is a
deadlock no scheduler without preempting training can break; it is the pipelines' to avoid
(e.g. by acquiring clusters in a global GPU order). tests/policy/test_hold_and_wait.py drives
random chains of hold-and-wait pipelines to completion under every policy; the two examples
above are in tests/policy/test_regressions.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rlix.policy.drain import drain_for
from rlix.policy.state import ClusterHold, Rank, RankStatus, Request

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler
    from rlix.policy.policies import Policy


@dataclass(slots=True)
class Reservations:
    """GPUs reserved for blocked requests in this round, and who is exempt from them."""

    reserved_for: dict[int, Request] = field(default_factory=dict)
    exempt: dict[int, frozenset[str]] = field(default_factory=dict)  # keyed by request seq
    #: What the oldest reserving request waits on: exempt from every reservation (rule 2).
    exempt_everywhere: frozenset[str] = frozenset()

    def blocks(self, gpu: int, pipeline_id: str) -> bool:
        request = self.reserved_for.get(gpu)
        return (
            request is not None
            and pipeline_id not in self.exempt[request.seq]
            and pipeline_id not in self.exempt_everywhere
        )

    def reserve(self, request: Request, gpus: tuple[int, ...], exempt: frozenset[str]) -> None:
        if not self.reserved_for:
            self.exempt_everywhere = exempt
        self.exempt[request.seq] = exempt
        for gpu in gpus:
            self.reserved_for.setdefault(gpu, request)


@dataclass(slots=True)
class Assessment:
    """What stands between a request and its mapping."""

    to_shrink: dict[int, Rank] = field(default_factory=dict)  # keyed by id(rank), in GPU order
    reason: str = ""
    lost: bool = False  # a GPU of the mapping is lost: nothing helps until it is back


def assess(sched: Scheduler, request: Request, gpus: tuple[int, ...], reservations: Reservations) -> Assessment:
    result = Assessment()
    cluster = sched.cluster
    for gpu in gpus:
        if gpu in cluster.offline:
            result.lost = True
            result.reason = f"GPU {gpu} is lost"  # the reason that matters most
            continue
        if reservations.blocks(gpu, request.pipeline_id):
            older = reservations.reserved_for[gpu]
            result.reason = result.reason or f"GPU {gpu} is reserved for {older.pipeline_id}/{older.cluster}"
            continue
        holder = cluster.owner[gpu]
        if holder is None:
            continue
        if isinstance(holder, ClusterHold):
            result.reason = result.reason or f"GPU {gpu} is held by {holder.pipeline_id}/{holder.cluster}"
        elif holder.status is not RankStatus.ACTIVE:
            result.reason = result.reason or f"GPU {gpu} is being loaded by {holder.pipeline_id} rank {holder.dp_rank}"
        elif holder.shrink_retry_after_s > sched.now:
            result.reason = result.reason or (
                f"GPU {gpu} is held by {holder.pipeline_id} rank {holder.dp_rank}, backing off after a failed shrink"
            )
        else:
            result.to_shrink[id(holder)] = holder
    return result


def waited_on(sched: Scheduler, gpus: tuple[int, ...]) -> frozenset[str]:
    """The pipelines a request for `gpus` waits on: the holders of its GPUs and, transitively,
    the holders of the GPUs of their own pending requests (they release nothing before those
    are granted)."""
    owner = sched.cluster.owner
    found: set[str] = set()
    to_scan = [gpus]
    while to_scan:
        for gpu in to_scan.pop():
            holder = owner[gpu]
            if type(holder) is ClusterHold and holder.pipeline_id not in found:
                found.add(holder.pipeline_id)
                pipeline = sched.pipelines[holder.pipeline_id]
                to_scan.extend(pipeline.spec.clusters[r.cluster].mapping for r in pipeline.pending.values())
    return frozenset(found)


def serve_requests(sched: Scheduler, policy: Policy) -> Reservations:
    reservations = Reservations()
    ledger = sched.ledger
    # Ranks cut for a grant may finish what they run first, the grant waiting that long at
    # most (rlix.policy.drain).
    drains = policy.drains_preempted
    for request in list(sched.queue):
        if request.pipeline_id not in sched.runnable:
            ledger.hold(request, f"waiting for its turn under the {policy.name} policy")
            continue
        gpus = sched.pipelines[request.pipeline_id].spec.clusters[request.cluster].mapping
        verdict = assess(sched, request, gpus, reservations)
        backing_off = request.retry_after_s > sched.now
        if not verdict.reason and not backing_off:
            shrinks = [ledger.shrink(rank, "preempt", drain_for(sched, request, rank) if drains else 0.0).decision_id
                       for rank in verdict.to_shrink.values()]
            ledger.grant(request, gpus, shrinks)
            continue
        if policy.futile_preemption and not backing_off:
            for rank in verdict.to_shrink.values():
                ledger.shrink(rank, "preempt")
        if policy.reserve_blocked and not verdict.lost:
            reservations.reserve(request, gpus, waited_on(sched, gpus))
        ledger.hold(request, verdict.reason or "backing off after a failed grant")
    return reservations
