"""Warm ranks: a pipeline's rollout ranks kept loaded between its rollouts (rlix only).

When a pipeline's rollout ends its ranks used to be shrunk at once ("release"): the driver
offloads the weights and puts the engine to sleep, and the next rollout wakes it and loads the
weights again. Often no one uses those GPUs in between: the pipeline's training runs on its
home, and the other jobs are in their tails, training, or kept off a home by the look-ahead.
Then the offload and the load are paid for nothing (on math-rlvr, seed 0, one expansion in six
reloaded a rank onto the GPUs it had left with nothing run there in between, ~20 s later).

With `PolicyConfig.keep_warm`, a rank of a pipeline that stopped rolling out (and may still
run) stays ACTIVE, "warm". The Publish between two rollouts syncs it, as it syncs every active
rollout rank (the simulator counts that in the publish's time, as for an off-policy pipeline's
ranks; the executor records it as the rank's sync), so the next rollout starts on it without a
load. Every round, before requests are served, a warm rank is shrunk ("release") unless
`may_stay_warm`: no waiting request maps to its GPUs (a gang never waits behind it for more
than its offload) and no other pipeline's home covers them. Another job's gangs come to its
home when that job's rollout ends, which the warm rank's pipeline cannot foresee, and each
would wait for the offload: on lab-day, where every GPU lies in 2.5 homes, keeping those too
made each training request wait 1.1 s more on average and cost 69 s of mean JCT on seed 0
(21 s over seeds 0-5).
It is also shrunk when

- a rolling pipeline that free GPUs would be lent to (demand left, not in its tail) has a
  bundle on them that the look-ahead does not keep it from (`release_wanted`, when rollout
  is planned), so sharing lends it as it would have lent a free GPU;
- a loan of an away owner's home falls due (rlix.policy.look_ahead, rule 2);
- its pipeline may no longer run, or leaves.

So a warm rank only holds GPUs no one else asks for; the price is the offload a new user of
the GPU waits for, which the release would have paid earlier.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlix.policy.state import PipelineState, Rank, RankStatus

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler
    from rlix.policy.placement import RoundPlanner


def requested_gpus(sched: Scheduler) -> frozenset[int]:
    """Every GPU a waiting non-rollout request maps to."""
    pipelines = sched.pipelines
    return frozenset(g for r in sched.queue for g in pipelines[r.pipeline_id].spec.clusters[r.cluster].mapping)


def may_stay_warm(sched: Scheduler, pipeline: PipelineState, rank: Rank, needed: frozenset[int]) -> bool:
    """Whether active `rank` of `pipeline` (which stopped rolling out) may stay loaded: on no
    GPU a waiting request maps to (`needed`), and on no GPU another pipeline's home covers."""
    if not needed.isdisjoint(rank.gpus):
        return False
    count = sched.cluster.home_count
    home = pipeline.spec.home
    return all(count[g] == 0 or (count[g] == 1 and g in home) for g in rank.gpus)


def warm_ranks(sched: Scheduler) -> list[Rank]:
    """Active ranks of pipelines not rolling out, in registration and dp_rank order."""
    return [r for p in sched.pipelines.values() if not p.rolling and p.active for r in p.active.values()
            if r.status is RankStatus.ACTIVE]


def release_wanted(sched: Scheduler, rollers: list[PipelineState], planner: RoundPlanner) -> None:
    """Shrink the warm ranks some roller could be lent the GPUs of (`planner.forbidden`: of a
    roller, the slot bits the look-ahead keeps it off this round; a rank wholly on the bits in
    every roller's, `planner.blocked_for_every_roller`, is kept without asking each roller)."""
    ranks = warm_ranks(sched)
    if not ranks:
        return
    keep_tail = sched.config.keep_busy_tail
    takers = [p for p in rollers if p.demand > 0 and not (keep_tail and p.in_tail)]
    if not takers:
        return
    cluster = sched.cluster
    now = sched.now
    kept_from_all = planner.blocked_for_every_roller()
    blocked = planner.forbidden
    for rank in ranks:
        if rank.shrink_retry_after_s > now:
            continue
        bits = cluster.bits_of(slot for gpu in rank.gpus for slot in cluster.slots_by_gpu[gpu])
        open_bits = bits & ~kept_from_all
        if open_bits and any(p.slot_bits & open_bits and p.slot_bits & bits & ~blocked(p) for p in takers):
            sched.ledger.shrink(rank, "release")
