"""Which rollout ranks cut for a grant drain first, and for how long (`Shrink.drain_s`, rlix only).

A rank cut for a higher-priority grant may drain: it takes no new trajectories and is cut when
it runs none or when its drain is up, the grant waiting that long at most. Trajectories about
to finish then finish instead of going back to be computed again. The price is the wait of
the gang that needs the GPUs, so the drain is given only where it is likely to pay:

1. **On the rank's own home, for another job.** A rank on GPUs of its own pipeline's home is
   cut by a job whose home is stacked on the same GPUs: jobs that take turns there, each drain
   soon repaid by the others'. A pipeline's own training cutting its own ranks does not wait
   for them (its step would wait on itself: alone on the pool that made `tiny` 1.2% slower
   than the sequential policy runs it). A rank on another pipeline's home is a loan,
   and its owner wants the GPUs back; loans are handed back on time by the look-ahead rule
   (rlix.policy.look_ahead), and the owner of a dedicated home is often the job on the critical
   path. Draining everywhere cost math-rlvr (dedicated homes) 2% of its steps/h (198.2 ->
   194.2); on its own home only, nothing.
2. **No longer than the gang it delays.** The drain is at most the time the requesting
   pipeline holds that cluster (a running mean over its stages there, which the core measures
   from grant applied to release, `PipelineState.hold_s`), and at most `max_drain_s`. Waiting 4 s
   for a 0.3-s log-probs pass of a small LoRA job quadruples it; waiting as long as the stage
   itself at most doubles it. A cluster never held before has no measure, and the ranks in
   its way are cut at once.

Over 8 seeds `blog-4on12` (four jobs stacked on one home) recomputes 17.8% of the tokens it
generates instead of 21.3% and loads weights 7.0% of the time instead of 7.7%, at the same
194.6 steps/h (its mean JCT 692 -> 705 s); the dedicated studies do not move (no stacked
homes); `lab-day` (seeds 0-5) 1,201 -> 1,206 s (bench/policy_ablation.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlix.policy.specs import Priority
from rlix.policy.state import ClusterHold, PipelineState, Rank, Request

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler


def measure_hold(sched: Scheduler, pipeline: PipelineState, hold: ClusterHold) -> None:
    """A held cluster was released: fold how long it was held (since its grant was applied)
    into its pipeline's running mean for that cluster (each new figure weighs one half, as the
    weight moves are measured). Init holds are left out: they come once, and last minutes."""
    since = hold.held_since_s
    if since != since or hold.priority == Priority.INIT:
        return  # released before its grant was applied; or an init, which does not come back
    took = sched.now - since
    old = pipeline.hold_s.get(hold.cluster)
    pipeline.hold_s[hold.cluster] = took if old is None else 0.5 * (old + took)


def drain_for(sched: Scheduler, request: Request, rank: Rank) -> float:
    """How long `rank`, cut for `request`'s grant, may drain (0: cut at once)."""
    bound = sched.config.max_drain_s
    if not bound or rank.pipeline_id == request.pipeline_id:
        return 0.0
    took = sched.pipelines[request.pipeline_id].hold_s.get(request.cluster)
    home = sched.pipelines[rank.pipeline_id].spec.home
    if not took or not home or not set(rank.gpus).issubset(home):
        return 0.0
    return min(bound, took)
