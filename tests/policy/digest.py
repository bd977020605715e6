"""A plain-data digest of a scheduler's state, to show that a rejected event changed nothing."""

from __future__ import annotations

from typing import Any

from rlix.policy import Scheduler
from rlix.policy.state import ClusterHold, Rank


def _holder(h: ClusterHold | Rank | None) -> tuple[Any, ...] | None:
    if h is None:
        return None
    if isinstance(h, Rank):
        return ("rank", h.pipeline_id, h.dp_rank, h.status.value, h.decision_id)
    return ("hold", h.pipeline_id, h.cluster, h.priority, h.status.value, h.decision_id)


def digest(sched: Scheduler) -> dict[str, Any]:
    pipelines = {}
    for pid, p in sched.pipelines.items():
        pipelines[pid] = (
            p.admitted_seq, p.rolling, p.estimate, dict(p.remaining), p.num_active_gpus,
            dict(p.versions), dict(p.allowed_step), sorted(p.pending), sorted(p.holdings),
            [(r.status.value, r.retry_after_s, r.release_when_applied) for r in p.ranks],
        )
    return {
        "now": sched.now,
        "next_seq": sched.next_seq,
        "next_id": sched.ledger.next_id,
        "owner": [_holder(h) for h in sched.cluster.owner],
        "releasing": dict(sched.cluster.releasing_by),
        "offline": sorted(sched.cluster.offline),
        "free": (sched.cluster.num_free, sched.cluster.free_bits, list(sched.cluster.slot_num_busy)),
        "queue": [(r.pipeline_id, r.cluster, r.priority, r.seq) for r in sched.queue],
        "inflight": sorted(sched.ledger.inflight),
        "pipelines": pipelines,
    }
