"""The policies' tunables (`PolicyConfig`): one frozen dataclass, validated like the specs.

A scenario sets them as `policy: {name: rlix, config: {...}}`; each field's comment says what it
does and what it measured when it was set (docs/policy-rules.md has the full record).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlix.policy.errors import SpecError
from rlix.policy.specs import is_int, is_number

#: The orders in which admitted jobs may start (PolicyConfig.job_order).
JOB_ORDERS = ("arrival", "shortest")


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Tunables shared by the policies (all times in the driver's seconds)."""

    #: After a failed decision, the same rank or request is not retried before this long.
    retry_backoff_s: float = 5.0
    #: Extra stickiness, in bundles, before an active rank is moved to another pipeline.
    #: 0 keeps only sticky rounding (see rlix.policy.split).
    rebalance_margin_bundles: float = 0.0
    #: No reversal of a rebalance within this long: a pipeline that was given ranks by a
    #: rebalance does not donate, and one that donated does not take from donors, until this
    #: much time has passed. A move costs a weight load plus re-queued trajectories, and as a
    #: rollout nears its end its remaining work (and so its share) swings from tick to tick;
    #: without this the split chases the noise. Expanding onto free GPUs is never held back.
    #: 90 s, not 30: with many jobs sharing a pool the split moves more, and each reversal
    #: reloads weights and re-queues long trajectories (lab-day, seeds 0-5: mean JCT 1,221 ->
    #: 1,200 s, loading 9.9% -> 9.2%; the dedicated studies within 1%, bench/policy_ablation.py).
    min_rebalance_interval_s: float = 90.0
    #: A pipeline in its tail (nothing queued, as its driver reports: RanksProgressed) keeps
    #: exactly its busy ranks: they are not cut for another pipeline's share (their trajectories
    #: would be re-queued and recomputed, and an on-policy step waits for its last ones), it is
    #: lent no more (it cannot use them), and its idle ranks are the ones given away. A job
    #: weighed by `finish_together` whose tails last longer than `min_rebalance_interval_s` is
    #: not held (rlix.policy.finish), but is still lent no free GPUs in its tail. The lab-day
    #: streams turn it off: with jobs arriving all day, a thin tail's ranks serve others better.
    keep_busy_tail: bool = True
    #: A rolling pipeline's share is at least the GPUs of its home it can use (its rollout
    #: bundles inside its home, at most one bundle per trajectory left), when these floors fit
    #: the GPUs rollout may use together: sharing lends only what owners leave idle. Off by
    #: default: on the bundled scenarios it cost steps/h (agentic-4x32 41.2 -> 40.3, math-rlvr
    #: 191.7 -> 190.7) and won nothing (bench/policy_ablation.py).
    home_floor: bool = False
    #: Which admitted job starts first when not every job may run (so it matters only with
    #: `max_home_load`): "arrival" (first come, first served) or "shortest" (the shortest
    #: runtime estimate first, aged by the time waited; see rlix.policy.job_order). rlix only.
    job_order: str = "arrival"
    #: At most this many GPUs of homes per GPU of the pool run at once (a job that would go past
    #: it waits; the first job always runs); 0: every admitted job runs at once. rlix only.
    max_home_load: float = 0.0
    #: Loans of a home whose owner is away between steps, or soon trains, are priced and
    #: handed back on time (see rlix.policy.look_ahead): no loan that would end before it
    #: worked `loan_payback` times as long as its weight load and offload take, and a loan is
    #: shrunk its offload time before the owner is expected back. rlix only. 8, not 1: a loan
    #: cut early also loses its in-flight trajectories, which a load time does not price
    #: (8 seeds: math-rlvr 199.9 -> 199.8 steps/h with loading 9.4% -> 7.9%, agentic-4x32
    #: 42.0 -> 42.2; lab-day mean JCT, seeds 0-5, 1,212 -> 1,214 s; 50 took it to 1,223 s).
    look_ahead: bool = True
    loan_payback: float = 8.0
    #: With `keep_busy_tail`: an on-policy pipeline in its tail whose driver migrates running
    #: trajectories to a joining rank, and whose busy ranks run more than this many each on
    #: average, is not held at its busy ranks but takes part in the split with them as a floor
    #: (rlix.policy.rollout.spreads); 0 holds every tail. rlix only.
    tail_spread_batch: int = 32
    #: A rollout rank cut for a higher-priority grant, on its own pipeline's home, drains for as
    #: long as the requesting pipeline holds that cluster (measured) and at most this long
    #: (`Shrink.drain_s`, rlix.policy.drain): it takes no new trajectories and is cut when it
    #: runs none or when its drain is up, so trajectories about to finish are not recomputed;
    #: the grant waits as long at most. 0: cut at once. rlix only.
    max_drain_s: float = 4.0
    #: A pipeline's rollout ranks stay loaded between its rollouts on GPUs no other home
    #: covers, while no request and no rolling pipeline needs them (rlix.policy.warm): the
    #: Publish in between syncs them, and the next rollout starts on them without a weight
    #: load (8 seeds: math-rlvr 199.8 -> 201.5 steps/h with loading 7.9% -> 6.4%, mixed-lora
    #: 116.4 -> 118.2, blog-4on12 194.6 -> 197.3). rlix only.
    keep_warm: bool = True
    #: A home given as a size stacks (rlix.policy.homes, rule 2) first on homes whose jobs'
    #: expected runtimes (`PipelineSpec.runtime_estimate_s`) are most like its job's: long jobs'
    #: rollout then sees few gangs, short jobs preempt short ones. Needs runtime estimates (the
    #: simulator gives each job's time alone on its home); without them, as before. rlix only.
    stack_by_runtime: bool = True
    #: With `stack_by_runtime`, once the homes cannot all be disjoint, a home joins a stack of
    #: alike jobs holding fewer than this many homes before taking GPUs no home covers
    #: (rlix.policy.homes, rule 0); 0: off. rlix only.
    alike_stack_depth: int = 4
    #: With `alike_stack_depth`, a home takes GPUs no home covers instead of joining a stack of
    #: alike jobs when the GPUs left uncovered after it would still hold this many homes of its
    #: size (rlix.policy.homes, rule 0): while uncovered GPUs are that scarce, keeping kinds
    #: apart protects the rollouts they run from other kinds' training gangs; past it, deep
    #: stacks only make alike jobs' training wait. Counted in homes, not as a share of the
    #: pool, so a large pool does not stack while most of it is uncovered. A number above the
    #: pool's homes (1e9): rule 0 whenever homes must overlap. rlix only.
    alike_reserve_homes: float = 3.0
    #: With `stack_by_runtime`, a home joins first the stack of alike jobs expected to empty
    #: (its last job leaving) when its job would leave (rlix.policy.homes, "leave together"),
    #: before the fewest covered: stacks then empty together and later jobs find GPUs of their
    #: own. Under rule 0, among the alike stacks at most one home deeper than the shallowest.
    #: rlix only.
    stack_by_departure: bool = True
    #: gamma > 0: the split weighs each rolling pipeline by (its projected time left / the
    #: longest projected time left) ** gamma, at least `finish_floor` (rlix.policy.finish), so
    #: jobs expected to finish early yield rollout GPUs to the ones that finish last; a job so
    #: weighed whose tails last long is not held at its busy ranks in its tail
    #: (`keep_busy_tail`): the weights say whose ranks are worth more. For a study judged by
    #: its makespan (steps per hour); in a stream of jobs it favours the longest, against the
    #: mean JCT. 0: off. rlix only.
    finish_together: float = 0.0
    #: With `finish_together`, the least split weight (before the spec's `weight`): a job well
    #: ahead of the last keeps this share of a last job's claim, so it still finishes soon.
    finish_floor: float = 0.08
    #: With `finish_together`: a job whose training cluster is held or requested weighs half
    #: its finish weight in the split, and a job with rollout work and no rank takes a bundle
    #: on GPUs no home covers from such a job weighing at most a third as much
    #: (rlix.policy.training_yields). rlix only.
    training_yields: bool = True
    #: An away pipeline expected back whose last absence ended in a rollout request has its
    #: rollout ranks loaded on the free bundles of its own home its load time before it is
    #: expected (rlix.policy.wake_ahead), so an on-policy step does not wait for the load
    #: after its publish. Needs `keep_warm` and `look_ahead`. rlix only.
    wake_ahead: bool = True
    #: A pipeline reads each training cluster's weights into host memory before it asks for
    #: the cluster's GPUs to init (`rlix.pipelines.ops.Prefetch`), so its init holds them only
    #: to copy the weights in and set up, and the jobs stacked on the same home train meanwhile.
    #: RLix's pipelines read under their priority-0 hold. rlix only.
    prefetch_weights: bool = True

    def validate(self) -> None:
        if not (is_number(self.finish_floor) and 0 < self.finish_floor <= 1):
            raise SpecError("config.finish_floor", self.finish_floor, "must be a number in (0, 1]")
        for name in ("retry_backoff_s", "rebalance_margin_bundles", "min_rebalance_interval_s", "max_home_load",
                     "loan_payback", "max_drain_s", "finish_together", "alike_reserve_homes"):
            value = getattr(self, name)
            if not (is_number(value) and value >= 0):
                raise SpecError(f"config.{name}", value, "must be a finite number >= 0")
        for name in ("tail_spread_batch", "alike_stack_depth"):
            if not is_int(getattr(self, name)) or getattr(self, name) < 0:
                raise SpecError(f"config.{name}", getattr(self, name), "must be an integer >= 0")
        for name in ("keep_busy_tail", "home_floor", "look_ahead", "stack_by_runtime", "stack_by_departure",
                     "keep_warm", "wake_ahead", "training_yields", "prefetch_weights"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"config.{name}", getattr(self, name), "must be true or false")
        if self.job_order not in JOB_ORDERS:
            raise SpecError("config.job_order", self.job_order, f"must be one of {', '.join(JOB_ORDERS)}")
