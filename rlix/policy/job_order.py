"""Which admitted jobs the rlix policy lets run, when the pool holds more than it should run at once.

By default rlix runs every admitted job at once: sharing lends what each leaves idle, and the
training clusters of jobs whose homes overlap are serialised by the request queue. When a
stream offers more work than the pool serves, that is processor sharing: every job runs, and
every job runs slowly, so each finishes late. Two settings (`PolicyConfig`) change that:

- `max_home_load` L: the homes of the jobs running at once cover at most L x the pool's GPUs
  (a job that would go past it waits; with nothing running, the first waiting job runs
  whatever its size). 0 turns the limit off. Sharing still lends idle GPUs across all of them.
- `job_order`: which waiting job starts first when one may. "arrival" is first come, first
  served. "shortest" starts the job with the smallest runtime estimate (the driver's
  `PipelineSpec.runtime_estimate_s`; the simulator gives each job's time alone on its home, as
  Slurm users give a time limit) minus the time it has waited since admission. Shortest-first
  lowers the mean completion time (SRPT is optimal for it on one server); the aging bounds
  starvation: a job of estimate E waiting w seconds goes ahead of every job of estimate
  E' > E - w, so once it has waited E - min(estimates) it is first in line. A job without an
  estimate counts as infinitely long and waits for those with one (in admission order).

A job that started is never stopped (it runs to its last step), so the limit only decides
start times. A sized home is placed when its job starts, among the running jobs' homes by
the shared rule (rlix.policy.homes.choose_shared_home), so waiting jobs claim no GPUs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rlix.policy.queueing import HomeCover, place_shared

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler
    from rlix.policy.state import PipelineState


def home_gpus(pipeline: PipelineState) -> int:
    """GPUs its home takes (a sized home counts its size before it is placed)."""
    spec = pipeline.spec
    return len(spec.home) if spec.home else spec.home_size or len(spec.footprint)


def start_key(pipeline: PipelineState, order: str, now: float) -> tuple[float, int]:
    """Smaller starts first: admission order, or the estimate less the time waited."""
    if order == "shortest":
        estimate = pipeline.spec.runtime_estimate_s
        waited_s = now - pipeline.admitted_s
        return (math.inf if estimate is None else estimate - waited_s, pipeline.admitted_seq)
    return (0.0, pipeline.admitted_seq)


def runnable_jobs(sched: Scheduler) -> frozenset[str]:
    """The jobs running (every one that ran before and is still admitted) plus those that may
    start now, in the configured order, while the home load allows."""
    config = sched.config
    admitted_ids = sched.admitted_ids()
    if admitted_ids <= sched.runnable:
        # The common case once the queue is empty, and every round asks: the running jobs
        # are the admitted ones, with nothing to order or place (a set test, not a scan).
        return admitted_ids
    admitted = [p for p in sched.pipelines.values() if p.admitted]
    running = [p for p in admitted if p.pipeline_id in sched.runnable]
    waiting = [p for p in admitted if p.pipeline_id not in sched.runnable]
    if not waiting:  # the common case once the queue is empty: nothing to order or place
        return frozenset(p.pipeline_id for p in running)
    waiting.sort(key=lambda p: start_key(p, config.job_order, sched.now))
    limit = config.max_home_load * sched.topology.num_gpus if config.max_home_load else math.inf
    used = sum(home_gpus(p) for p in running)
    cover: HomeCover | None = None  # with `usable`, built when a sized home is first placed
    usable: set[int] = set()
    for pipeline in waiting:
        size = home_gpus(pipeline)
        if running and used + size > limit:
            break  # in order: a later, smaller job does not pass the one that waits
        if not pipeline.spec.placed:
            if cover is None:
                cover = HomeCover(sched, running)
                usable = set(range(sched.topology.num_gpus)) - sched.cluster.offline
            if not place_shared(sched, pipeline, cover, usable):
                break  # more GPUs lost than the pool can spare: tried again next round
        running.append(pipeline)
        used += size
    return frozenset(p.pipeline_id for p in running)
