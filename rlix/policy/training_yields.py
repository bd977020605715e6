"""A job in training yields: where the split weighs jobs by their time left, a job whose training
gang holds or waits for its GPUs gives way to the jobs whose steps wait on their rollout.

With `PolicyConfig.finish_together` on (a study judged by its makespan, rlix.policy.finish) and
`PolicyConfig.training_yields`, two rules. A job is *in training* while a training cluster of
it is held or requested (`PipelineState.holdings`, `pending`); with staleness 1 its next
rollout runs meanwhile, but that rollout's step cannot end before the gang and the weight
publish after it (6 s and 23 s a step for a 7B job on blog-4on12).

1. Half weight. A rolling job in training weighs `TRAINING_WEIGHT` of its finish weight in the
   split (rlix.policy.finish.set_split_weights).
2. A first bundle from a job in training. A rolling job with work left, no rank at all (a new
   step waiting for its first bundle, or a job whose ranks a gang just cut) and none in its
   split target (the one-bundle minimums did not all fit) takes a bundle on GPUs no home
   covers from an active rank of a job in training weighing at most 1 / `YIELD_RATIO` (a
   third) of its weight: the lightest such job first, then its rank running the fewest trajectories, the
   heaviest rank-less job first. The holder's trajectories there go back to its queue, and it
   takes the taker's place among the jobs waiting for a first bundle. GPUs no home
   covers are the only ones no training gang takes, so who holds them decides whose rollout
   runs uncut; the split's one-bundle minimum keeps them with their holders ("Scarce bundles
   stay with their holders", docs/policy-rules.md), and a job with no rank otherwise waits
   for the gangs on the homes to end. The split is computed again after such a move.

On blog-4on12 (four 7B jobs whose homes are all GPUs 0-7) a new step's rollout waited 12-25 s
for any rank while the gangs held GPUs 0-7 and two other jobs held 8-11; with both rules the
study went from 198.1 to 202.1 steps/h over seeds 0-31 (198.8 -> 201.7 over seeds 0-7). Rule 2
carries it; rule 1 alone gave 198.1 against 197.8 before (seeds 0-15). What the holder is doing
matters: taking from any holder half as heavy, in training or not, gave 198.1 (seeds 0-15), and
from a holder in training or publishing whatever the weights, 189.7 (seeds 0-7; ad-hoc patches,
docs/policy-rules.md). Each bundle handed over re-queues the holder's trajectories there (97
on the median): at a ratio of 2 the study reached 202.2 steps/h but recomputed 21.8% of the
tokens it generated, against 18.8% before (seeds 0-31); at 3, 19.3%, and at 4, 6 and 8 the
gain falls (201.7, 201.2, 200.8) for little less recomputed (19.3%, 19.1%, 19.0%). The other
studies move within their noise, and lab-day, which finishes nothing together, not at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlix.policy.placement import usable_by
from rlix.policy.state import RANK_ACTIVE, PipelineState, Rank

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler

#: Rule 1: the share of its finish weight a job in training keeps in the split.
TRAINING_WEIGHT = 0.5
#: Rule 2: a job with no rank takes a bundle from a job in training whose weight (after rule 1)
#: times this is at most its own.
YIELD_RATIO = 3.0


def in_training(pipeline: PipelineState) -> bool:
    """A training cluster of the pipeline is held or requested."""
    return bool(pipeline.holdings or pipeline.pending)


def yields(sched: Scheduler) -> bool:
    """Whether the rules are on: `training_yields` with `finish_together`."""
    config = sched.config
    return bool(config.training_yields and config.finish_together)


def _offers(sched: Scheduler, rollers: list[PipelineState]) -> list[tuple[float, int, int, int, PipelineState, Rank]]:
    """The active ranks on GPUs no home covers of the rollers in training, as (weight,
    trajectories running by the last report, admission, dp_rank, pipeline, rank): the lightest
    job first, then the fewest trajectories, then admission and rank order."""
    home_count = sched.cluster.home_count
    now = sched.now
    offers = []
    for pipeline in rollers:
        if not in_training(pipeline):
            continue
        in_flight = pipeline.in_flight or {}
        for rank in pipeline.active.values():
            if (rank.status is RANK_ACTIVE and rank.shrink_retry_after_s <= now
                    and not any(home_count[gpu] for gpu in rank.gpus)):
                offers.append((pipeline.split_weight, in_flight.get(rank.dp_rank, 0), pipeline.admitted_seq,
                               rank.dp_rank, pipeline, rank))
    offers.sort(key=lambda offer: offer[:4])  # unique: the pipeline and rank are never compared
    return offers


def hand_over_first_bundles(sched: Scheduler, rollers: list[PipelineState]) -> bool:
    """Rule 2 (module docstring), the heaviest rank-less job first; whether any bundle moved."""
    if len(rollers) < 2:
        return False
    targets = sched.targets
    # Only those the split left without a bundle: the others find one free or from donors.
    waiting = [p for p in rollers if p.demand > 0 and not p.active and targets.get(p.pipeline_id, 0) < p.tp]
    if not waiting:
        return False
    offers = _offers(sched, rollers)
    if not offers:
        return False
    waiting.sort(key=lambda p: (-p.split_weight, p.admitted_seq))
    now = sched.now
    moved = False
    for taker in waiting:
        for index, (weight, _, _, _, holder, victim) in enumerate(offers):
            if weight * YIELD_RATIO > taker.split_weight:
                break  # the rest weigh as much or more
            rank = taker.rank_by_slot.get(victim.slot)
            if rank is None or not usable_by(sched, rank, taker.pipeline_id):
                continue
            sched.ledger.hand_over(victim, rank)
            holder.last_rebalanced_out_s = taker.last_rebalanced_in_s = now
            del offers[index]
            moved = True
            break
    return moved
