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
pipeline's split weight is its spec's weight times `max(left / longest left, FLOOR) ** gamma`
(1 for the job that finishes last; the floor keeps a nearly done job's share above zero). A
pipeline whose time left is unknown (no step count, or fewer than two versions seen) keeps its
spec's weight. The weights change only through events (new versions, the clock of each
round), so replay stays exact.

On a stream of jobs (lab-day) this would serve the longest job first, against the mean JCT,
so it is off unless a scenario asks for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlix.policy.state import PipelineState

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler

#: The least ratio of a pipeline's time left to the longest before the power.
FLOOR = 0.05


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
    """Each rolling pipeline's `split_weight` for this round (module docstring)."""
    gamma = sched.config.finish_together
    if not gamma:
        return
    left = {p.pipeline_id: time_left_s(p) for p in sched.pipelines.values() if p.admitted}
    known = [s for s in left.values() if s is not None]
    longest = max(known, default=0.0)
    for pipeline in rollers:
        mine = left.get(pipeline.pipeline_id)
        if mine is None or longest <= 0.0:
            pipeline.split_weight = pipeline.spec.weight
        else:
            pipeline.split_weight = pipeline.spec.weight * max(mine / longest, FLOOR) ** gamma
