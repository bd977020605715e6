"""Finishing together: the rollout split weighted by how long each job has left.

A study of jobs submitted together is judged by its makespan: steps per hour over the time the
last job ends. The split by remaining rollout work alone treats every job alike, so a job that
steps faster (an off-policy one, whose rollout overlaps its training) or started earlier ends
well before the last, and the last (an on-policy job whose step waits for its longest
trajectory) spends its whole run with a share of the pool. What shortens the makespan is
giving the jobs that finish last the GPUs the early ones can spare, as a scheduler of parallel
machines serves the longest remaining work first.

The core projects each admitted pipeline's time left from what it sees: an adapter's steps
left (`PipelineSpec.num_steps` less its newest version) times its mean step period (between the
first and the latest new version the core saw, `TrainStepFinished`); a pipeline's time left is
its adapters' longest. With `PolicyConfig.finish_together` = gamma > 0, each rolling
pipeline's split weight is its spec's weight times `max((left / longest left) ** gamma,
finish_floor)`: 1 for the job that finishes last, near 1 for those about as long, and the floor
(0.08) for every job well ahead. A pipeline whose time left is unknown (no step count, or fewer
than two versions seen) keeps its spec's weight. The weights change only through events (new
versions, the clock of each round), so replay stays exact.

Why a floor under the weight, with a high gamma (the studies set 12): the power alone, at a
gamma that shortens the makespan, also starves the jobs well ahead of the last, which then end
late for nothing. With the floor a job ahead keeps about a twelfth of a last job's claim and
ends soon, and the power sorts only the jobs near the last. On agentic-4x32 (8 seeds, gamma
12, tails held) the floor took the mean JCT from 5,447 to 5,320 s at 43.4 steps/h.

A pipeline weighed so whose tails last longer than the no-reversal interval
(`min_rebalance_interval_s`, as the core measures them: `PipelineState.tail_s`) is not held at
its busy ranks in its tail (`keep_busy_tail`; `PipelineState.tail_held`): whether its running
trajectories are worth their ranks is what the weights say. A job well ahead gives busy ranks
to the one that ends last, whose own tail spreads onto them: the simulator's engine moves
running trajectories onto a joining rank, and a decode iteration's time grows with the batch.
That took agentic-4x32 on to 44.0 steps/h at 5,285 s (from 43.3 at 5,348 s with gamma 4, no
floor and every tail held); its tails last 190-570 s. A shorter tail ends before a rebalance
may move the ranks again, and releasing those only added moves: math-rlvr's tails (16-140 s)
took its loading share from 6.1% to 7.2% of GPU time. A tail is still lent no free GPU:
lending them too cost blog-4on12 2 steps/h (196.6 against 198.9).

On a stream of jobs (lab-day) this would serve the longest job first, against the mean JCT,
so it is off unless a scenario asks for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlix.policy.state import PipelineState
from rlix.policy.training_yields import TRAINING_WEIGHT, in_training, yields

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler

def time_left_s(pipeline: PipelineState) -> float | None:
    """Projected seconds until the pipeline's last step: its adapters' longest steps left
    times mean step period, or None (a step count or a period unknown)."""
    spec = pipeline.spec
    longest = 0.0
    for adapter in spec.adapter_names:
        num_steps = spec.steps_of(adapter)
        first, version = pipeline.first_version_at.get(adapter), pipeline.versions[adapter]
        if num_steps is None or first is None or version <= first[1]:
            return None
        period_s = (pipeline.last_version_s[adapter] - first[0]) / (version - first[1])
        longest = max(longest, max(num_steps - version, 0) * period_s)
    return longest


def set_split_weights(sched: Scheduler, rollers: list[PipelineState]) -> None:
    """Each rolling pipeline's `split_weight` for this round, and whether its tail is held
    (`tail_held`; module docstring)."""
    gamma = sched.config.finish_together
    if not gamma:
        return
    left = {p.pipeline_id: time_left_s(p) for p in sched.pipelines.values() if p.admitted}
    known = [s for s in left.values() if s is not None]
    longest = max(known, default=0.0)
    floor = sched.config.finish_floor
    interval_s = sched.config.min_rebalance_interval_s
    training_yields = yields(sched)
    for pipeline in rollers:
        mine = left.get(pipeline.pipeline_id)
        # Weighed only with a projection of its own and of the longest; else its spec's weight.
        factor = max((mine / longest) ** gamma, floor) if mine is not None and longest > 0.0 else None
        # nan (no tail measured yet) compares false: held
        held = factor is None or not pipeline.tail_s > interval_s
        if held != pipeline.tail_held:
            pipeline.tail_held = held
            pipeline.donor_order_cache = None  # its busy ranks are kept, or given, from now on
        weight = pipeline.spec.weight * (1.0 if factor is None else factor)
        if training_yields and in_training(pipeline):
            weight *= TRAINING_WEIGHT  # rlix.policy.training_yields, rule 1
        pipeline.split_weight = weight
