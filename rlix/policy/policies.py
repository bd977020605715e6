"""The policies behind one interface, selectable by name.

- `rlix` (default): reservation for blocked requests, no futile preemption, the normalised,
  sticky proportional split with donor choice, and work-conserving fill.
- `gap-ratio`: a model of RLix's reference behaviour (futile preemption, no reservation, the
  un-normalised gap-ratio split with its one-bundle floor), for comparison.
- `static`: no sharing, a Slurm-style FIFO queue of gang jobs. Each pipeline owns its home (a
  sized home placed first fit when it starts) until its last step; a pipeline whose home is
  taken waits (rlix.policy.queueing). Inside its home its rollout uses every free bundle.
- `static-backfill`: `static` with EASY backfill, Slurm's default (runtime estimates from the
  specs).
- `sequential`: one pipeline at a time on the whole pool, in admission order.

Sized homes are placed by the policy (rlix.policy.queueing): at admission by rlix and gap-ratio,
when the job starts by the queueing policies.

A policy also declares which of the ten invariants it guarantees, so that the checker holds
each policy to its own promises (the RLix model, by design, breaks 4, 5 and 6).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rlix.policy.errors import SpecError
from rlix.policy.gap_ratio import CycleTrigger, plan_gap_ratio
from rlix.policy.homes import choose_home, placement_unit
from rlix.policy.job_order import runnable_jobs
from rlix.policy.lifecycle import place
from rlix.policy.queueing import JobQueue, place_admitted
from rlix.policy.rollout import fill_free, plan_rlix

if TYPE_CHECKING:
    from rlix.policy.config import PolicyConfig
    from rlix.policy.core import Scheduler
    from rlix.policy.events import Event

ALL_INVARIANTS = frozenset(range(1, 11))


class Policy:
    """Base policy: every admitted pipeline may run; subclasses plan rollout."""

    name: ClassVar[str] = ""
    reserve_blocked: ClassVar[bool] = True
    futile_preemption: ClassVar[bool] = False
    #: Ranks cut for a grant drain for up to `PolicyConfig.max_drain_s` (see `Shrink.drain_s`).
    drains_preempted: ClassVar[bool] = False
    #: Keeps the ranks of a pipeline between its rollouts loaded while no one needs their GPUs,
    #: with `PolicyConfig.keep_warm` (rlix.policy.warm).
    keeps_warm: ClassVar[bool] = False
    #: Stacks a sized home with homes of jobs of like expected runtime, with
    #: `PolicyConfig.stack_by_runtime` (rlix.policy.homes, "like with like").
    stacks_by_runtime: ClassVar[bool] = False
    #: Keeps each pipeline on its home (its pool-wide clusters cut to the home): no sharing.
    confines_to_home: ClassVar[bool] = False
    #: Plans with each job's expected run time (`PipelineSpec.runtime_estimate_s`): a driver
    #: should give it (the simulator gives each job's time alone on its home).
    needs_runtime_estimates: ClassVar[bool] = False
    #: Its pipelines read their weights into host memory before they ask for GPUs to init on,
    #: with `PolicyConfig.prefetch_weights` (`rlix.pipelines.ops.Prefetch`). RLix's pipelines
    #: (gap-ratio) read under their priority-0 hold; a queued job (static, sequential) starts
    #: its processes only once its GPUs are its own.
    prefetches_weights: ClassVar[bool] = False
    guarantees: ClassVar[frozenset[int]] = ALL_INVARIANTS

    @classmethod
    def prefetches(cls, config: PolicyConfig) -> bool:
        """Whether, so configured, its pipelines prefetch their weights (the drivers set each
        program's `prefetch_weights` from it)."""
        return cls.prefetches_weights and config.prefetch_weights

    @classmethod
    def wants_runtime_estimates(cls, config: PolicyConfig, sized_homes: bool = False) -> bool:
        """Whether, so configured, it plans with each job's expected run time (`sized_homes`:
        some pipeline's home is a size the policy places)."""
        return cls.needs_runtime_estimates or (sized_homes and cls.stacks_by_runtime and config.stack_by_runtime)

    def runnable(self, sched: Scheduler) -> frozenset[str]:
        pipelines = sched.pipelines.values()
        if all(p.placed for p in pipelines):  # the common case: no sized home waits
            return sched.admitted_ids()
        place_admitted(sched)
        return frozenset(p.pipeline_id for p in pipelines if p.admitted and p.placed)

    def round_ready(self, sched: Scheduler, event: Event) -> bool:
        """Whether a decision round runs after `event` (else the event is only applied)."""
        return True

    def plan_rollout(self, sched: Scheduler) -> None:
        raise NotImplementedError


class RlixPolicy(Policy):
    name = "rlix"
    drains_preempted = True
    keeps_warm = True
    stacks_by_runtime = True
    prefetches_weights = True

    @classmethod
    def wants_runtime_estimates(cls, config: PolicyConfig, sized_homes: bool = False) -> bool:
        return config.job_order == "shortest" or super().wants_runtime_estimates(config, sized_homes)

    def runnable(self, sched: Scheduler) -> frozenset[str]:
        config = sched.config
        if not config.max_home_load and config.job_order == "arrival":
            return super().runnable(sched)
        return runnable_jobs(sched)

    def plan_rollout(self, sched: Scheduler) -> None:
        plan_rlix(sched)


class GapRatioPolicy(Policy):
    name = "gap-ratio"
    reserve_blocked = False
    futile_preemption = True
    guarantees = ALL_INVARIANTS - {4, 5, 6}

    def __init__(self) -> None:
        self.cycles = CycleTrigger()

    def round_ready(self, sched: Scheduler, event: Event) -> bool:
        return self.cycles.ready(sched, event)

    def plan_rollout(self, sched: Scheduler) -> None:
        plan_gap_ratio(sched)


class _ExclusivePolicy(Policy):
    """Pipelines never share GPUs; a runnable pipeline's rollout takes every free bundle."""

    guarantees = ALL_INVARIANTS - {6}  # there is no split to track

    def plan_rollout(self, sched: Scheduler) -> None:
        rollers = sched.rolling_pipelines()
        sched.targets = {p.pipeline_id: len(p.ranks) * p.tp for p in rollers}
        sched.ideal = {pid: float(t) for pid, t in sched.targets.items()}
        fill_free(sched, rollers)


class StaticPolicy(_ExclusivePolicy):
    name = "static"
    confines_to_home = True
    backfill: ClassVar[bool] = False

    def __init__(self) -> None:
        self.queue = JobQueue(confine=True, backfill=self.backfill)

    def runnable(self, sched: Scheduler) -> frozenset[str]:
        return self.queue.runnable(sched)


class StaticBackfillPolicy(StaticPolicy):
    name = "static-backfill"
    backfill = True
    needs_runtime_estimates = True


class SequentialPolicy(_ExclusivePolicy):
    name = "sequential"

    def runnable(self, sched: Scheduler) -> frozenset[str]:
        admitted = sched.admitted_in_order()
        if not admitted:
            return frozenset()
        first = admitted[0]
        if not first.spec.placed:
            usable = set(range(sched.topology.num_gpus)) - sched.cluster.offline
            home = choose_home(first.spec.home_size, placement_unit(first.spec), usable, sched.topology)
            if home is None:
                return frozenset()
            place(sched, first, home, confine=False)
        return frozenset({first.pipeline_id})


POLICIES: dict[str, type[Policy]] = {
    cls.name: cls for cls in (RlixPolicy, GapRatioPolicy, StaticPolicy, StaticBackfillPolicy, SequentialPolicy)
}


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise SpecError("policy", name, f"unknown policy (known: {sorted(POLICIES)})") from None
