"""Waking a pipeline's rollout ranks before it comes back for them (rlix only).

An on-policy pipeline's step ends with its publish: actor training has released its home, and
the new weights go out for a while (~23 s for a 7B at RLix's 0.67 GB/s) before the next
rollout may start. Its home is free meanwhile, and the look-ahead keeps it from loans that
would not pay (rlix.policy.look_ahead, rule 1). When the rollout then asks for GPUs, its ranks
load first (an engine wake and a weight copy, ~2.3 s for a 7B at TP 2), and the step, on the
critical path of its study, waits for that. Alone with every GPU the same pipeline does not
wait: its ranks elsewhere stay warm through the publish (rlix.policy.warm) and its rollout
starts on them at once. On math-rlvr, seed 0, the 7B on-policy job that sets the makespan lost
2.3 s so in 14 of its 20 steps (33 s of the 59 s it ran behind its time alone).

So an away pipeline that is expected back (look-ahead: its last absence measured) and whose
last absence ended in a rollout request is woken ahead: once its expected return is within
its measured load time, its ranks are expanded on the free bundles of its own home (GPUs no
other home covers, wanted by no waiting request). They are warm ranks from then on: the
publish syncs them as it syncs every active rank, and the rollout starts on them. A loan of
that home is reclaimed that much earlier too (look-ahead rule 2), so the owner's load does not
wait for the borrower's offload.

What it costs: the home is idle or warm either way (no loan there would pay); if the owner
comes back with a training request instead, or later than expected, the warm ranks are shrunk
as any warm rank is (rlix.policy.warm), an offload for nothing.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rlix.policy.look_ahead import own_home_slots, wakes_ahead
from rlix.policy.warm import requested_gpus

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler
    from rlix.policy.look_ahead import Loans


def wake_owners(sched: Scheduler, loans: Loans) -> float:
    """Expand the ranks of away owners due within their load time on the free bundles of their
    own homes; returns when the next owner falls due (inf: none)."""
    now = sched.now
    cluster = sched.cluster
    ledger = sched.ledger
    needed: frozenset[int] | None = None
    next_due = math.inf
    for due, _bits, _gpus, owner in loans.owners:  # due: its expected return less its load time
        if not wakes_ahead(sched, owner):
            continue
        if due > now:
            next_due = min(next_due, due)
            continue
        candidates = cluster.free_bits & own_home_slots(sched, owner)
        if not candidates:
            continue
        if needed is None:
            needed = requested_gpus(sched)  # reserved GPUs among them: they are waiting requests'
        while candidates:
            lowest = candidates & -candidates
            candidates ^= lowest
            # A free bundle's rank is inactive; it may still be backing off.
            rank = owner.rank_by_slot[cluster.slot_of_bit[lowest.bit_length() - 1]]
            if rank.retry_after_s <= now and needed.isdisjoint(rank.gpus):
                ledger.expand(rank)
                rank.woken_ahead_id = rank.decision_id
    return next_due
