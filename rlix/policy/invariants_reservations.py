"""Invariant 5, no overtaking, and the reservations it is judged by, worked out from the queue.

Part of `rlix.policy.invariants`. Who waits on whom is computed here from the queue, the
holdings and the mappings, not taken from the core's admission (`rlix.policy.admission`), so
a bookkeeping bug there cannot hide itself; `check_split` (`rlix.policy.invariants_split`)
uses the same view for the GPUs rollout may use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlix.policy.decisions import Decision, Expand, Grant
from rlix.policy.errors import InvariantViolation
from rlix.policy.state import ClusterHold, Request

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler


def _fail(number: int, detail: str) -> None:
    raise InvariantViolation(number, detail)


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
