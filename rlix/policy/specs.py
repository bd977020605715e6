"""Typed, validated specs: the cluster topology, stage priorities and pipelines.

Specs are plain frozen dataclasses (standard library only). `validate()` on each raises a
`SpecError` naming the field and value; the core calls it before it registers anything.
What configuration files give in another but unambiguous form is accepted and converted when
the spec is built: a list (or range) of GPU ids or of adapter names becomes a tuple, a kind
given as its string value becomes the `PipelineKind`. Booleans are never numbers or ids.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any, TypeGuard

from rlix.policy.errors import SpecError


class Priority(IntEnum):
    """Stage priorities: a lower number is served first. Only ROLLOUT is preemptible."""

    INIT = 0
    ACTOR_TRAIN = 1
    CRITIC_TRAIN = 2
    OLD_LOG_PROBS = 3
    REF_LOG_PROBS = 4
    VALUE = 5
    ROLLOUT = 6


class PipelineKind(StrEnum):
    FULL_FINETUNE = "full_finetune"
    MULTI_LORA = "multi_lora"


ROLLOUT_CLUSTER = "actor_infer"
#: The trainer whose weights the rollout ranks run (its init also starts the rollout workers).
WEIGHTS_CLUSTER = "actor_train"
#: A cluster whose mapping follows the pipeline's home ("home": the home's GPUs; "pool": the
#: home's GPUs first, then every other GPU of the pool). A pipeline with a sized home has such
#: clusters unmapped until the core places the home (rlix.policy.homes).
HOME_SCOPE = "home"
POOL_SCOPE = "pool"
SCOPES = (HOME_SCOPE, POOL_SCOPE)
#: The largest amount of rollout work (an estimate or a progress report) the core accepts, in
#: the driver's units (trajectories, tokens, ...). Far above any real step (a day of a large
#: cluster is ~1e11 tokens), and low enough that shares (work x TP x weight) summed over
#: every pipeline stay far from float overflow in every policy.
MAX_WORK = 1e18
CLUSTER_NAMES = ("actor_train", "actor_infer", "critic", "reference")
#: The adapter name a full-finetune pipeline uses in events and tables (it has one model).
BASE_ADAPTER = "base"
#: The key of a multi-LoRA pipeline's pipeline-wide progress total; no adapter may be named so.
TOTAL_KEY = "*"


def is_int(value: object) -> TypeGuard[int]:
    """An integer that is not a bool (True is an int to Python, never a GPU id or a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    """A finite int or float that is not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _as_tuple(value: object) -> object:
    """A list or range (as YAML/JSON or a quick script give it) as a tuple; anything else as is."""
    return tuple(value) if isinstance(value, list | range) else value


@dataclass(frozen=True, slots=True)
class Topology:
    """`num_nodes` nodes of `gpus_per_node` GPUs; GPU g lives on node g // gpus_per_node."""

    num_nodes: int
    gpus_per_node: int

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    def node_of(self, gpu: int) -> int:
        return gpu // self.gpus_per_node

    def validate(self) -> None:
        for name in ("num_nodes", "gpus_per_node"):
            value = getattr(self, name)
            if not is_int(value) or value < 1:
                raise SpecError(f"topology.{name}", value, "must be a positive integer")


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """A cluster's tensor-parallel size and device mapping.

    Rollout rank r owns the fixed bundle `mapping[r*tp:(r+1)*tp]`. `scope` ("home" or "pool")
    says the mapping follows the pipeline's home; it is empty until a sized home is placed.
    """

    tp: int
    mapping: tuple[int, ...]
    scope: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "mapping", _as_tuple(self.mapping))

    @property
    def num_ranks(self) -> int:
        return len(self.mapping) // self.tp

    def bundle(self, rank: int) -> tuple[int, ...]:
        return self.mapping[rank * self.tp : (rank + 1) * self.tp]

    def validate(self, where: str, topology: Topology) -> None:
        tp = self.tp
        if not is_int(tp) or tp < 1:
            raise SpecError(f"{where}.tp", tp, "must be a positive integer")
        if not isinstance(self.mapping, tuple):
            raise SpecError(f"{where}.mapping", self.mapping, "must be a list or tuple of GPU ids")
        if self.scope and self.scope not in SCOPES:
            raise SpecError(f"{where}.scope", self.scope, f"must be one of {SCOPES} or empty")
        if not self.mapping and self.scope:
            return  # follows a home not placed yet
        if not self.mapping:
            raise SpecError(f"{where}.mapping", self.mapping, "must name at least one GPU")
        seen: set[int] = set()
        for gpu in self.mapping:
            if not is_int(gpu):
                raise SpecError(f"{where}.mapping", gpu, "GPU ids must be integers")
            if not 0 <= gpu < topology.num_gpus:
                raise SpecError(
                    f"{where}.mapping", gpu, f"GPU id outside the cluster [0, {topology.num_gpus})"
                )
            if gpu in seen:
                raise SpecError(f"{where}.mapping", gpu, "duplicate GPU in the device mapping")
            seen.add(gpu)
        if len(self.mapping) % tp:
            raise SpecError(
                f"{where}.tp", tp, f"does not divide the mapping length {len(self.mapping)}"
            )
        for rank in range(self.num_ranks):
            nodes = {topology.node_of(g) for g in self.bundle(rank)}
            if len(nodes) > 1:
                raise SpecError(
                    f"{where}.mapping",
                    self.bundle(rank),
                    f"TP bundle of rank {rank} spans nodes {sorted(nodes)}",
                )


@dataclass(frozen=True, slots=True)
class PipelineSpec:
    """One RL pipeline: its clusters, adapters, staleness bounds, job weight and home.

    `max_staleness` is one bound for every adapter, or a bound per adapter name. A trajectory
    consumed by train step s must come from weights of version >= s - k (k = 0: on-policy).
    `weight` scales the pipeline's share of rollout GPUs (1.0 = by remaining work alone).
    `home` is the GPUs the pipeline would own without sharing (may overlap other homes);
    `home_size` > 0 with an empty `home` asks the core to place a home of that many GPUs
    (clusters with a `scope` are mapped then). `runtime_estimate_s` is the job's expected
    time alone, for policies that plan ahead (EASY backfill); None: unknown.
    `rollout_migrates`: its driver moves running trajectories onto a rollout rank that joins
    (prefix kept and recomputed there), so more ranks help even when nothing is queued.
    `num_steps`: the train steps each adapter runs in all, one number or one per adapter (as
    a trainer's config says), for policies that project when a job will finish; None: unknown.
    """

    pipeline_id: str
    kind: PipelineKind
    clusters: dict[str, ClusterSpec]
    adapters: tuple[str, ...] = ()
    max_staleness: int | dict[str, int] = 0
    weight: float = 1.0
    home: tuple[int, ...] = ()
    home_size: int = 0
    runtime_estimate_s: float | None = None
    rollout_migrates: bool = False
    num_steps: int | dict[str, int] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "adapters", _as_tuple(self.adapters))
        object.__setattr__(self, "home", _as_tuple(self.home))
        if isinstance(self.kind, str) and not isinstance(self.kind, PipelineKind):
            if self.kind in {k.value for k in PipelineKind}:
                object.__setattr__(self, "kind", PipelineKind(self.kind))

    @property
    def rollout(self) -> ClusterSpec:
        return self.clusters[ROLLOUT_CLUSTER]

    @property
    def adapter_names(self) -> tuple[str, ...]:
        return self.adapters if self.kind is PipelineKind.MULTI_LORA else (BASE_ADAPTER,)

    def staleness_of(self, adapter: str) -> int:
        if isinstance(self.max_staleness, dict):
            return self.max_staleness[adapter]
        return self.max_staleness

    def steps_of(self, adapter: str) -> int | None:
        """The train steps `adapter` runs in all, or None (unknown)."""
        if isinstance(self.num_steps, dict):
            return self.num_steps[adapter]
        return self.num_steps

    @property
    def footprint(self) -> frozenset[int]:
        """Every GPU any of the pipeline's clusters may use."""
        return frozenset().union(*(c.mapping for c in self.clusters.values()))

    @property
    def placed(self) -> bool:
        """Whether every cluster is mapped (false only for a sized home not placed yet)."""
        return all(c.mapping for c in self.clusters.values())

    def validate(self, topology: Topology) -> None:
        pid = self.pipeline_id
        if not isinstance(pid, str) or not pid:
            raise SpecError("pipeline_id", pid, "must be a non-empty string")
        if not isinstance(self.kind, PipelineKind):
            raise SpecError(f"{pid}.kind", self.kind, f"must be one of {[k.value for k in PipelineKind]}")
        if not isinstance(self.clusters, dict):
            raise SpecError(f"{pid}.clusters", self.clusters, "must map cluster names to ClusterSpecs")
        for name, cluster in self.clusters.items():
            if name not in CLUSTER_NAMES:
                raise SpecError(f"{pid}.clusters", name, f"unknown cluster (known: {CLUSTER_NAMES})")
            if not isinstance(cluster, ClusterSpec):
                raise SpecError(f"{pid}.clusters.{name}", cluster, "must be a ClusterSpec")
            cluster.validate(f"{pid}.clusters.{name}", topology)
        if ROLLOUT_CLUSTER not in self.clusters:
            raise SpecError(f"{pid}.clusters", sorted(self.clusters), "every pipeline needs actor_infer")
        self._validate_adapters()
        if not (is_number(self.weight) and self.weight > 0):
            raise SpecError(f"{pid}.weight", self.weight, "must be a positive finite number")
        self._validate_home(topology)
        estimate = self.runtime_estimate_s
        if estimate is not None and not (is_number(estimate) and estimate > 0):
            raise SpecError(f"{pid}.runtime_estimate_s", estimate, "must be None or a positive finite number")
        if not isinstance(self.rollout_migrates, bool):
            raise SpecError(f"{pid}.rollout_migrates", self.rollout_migrates, "must be true or false")

    def _validate_home(self, topology: Topology) -> None:
        pid, home, size = self.pipeline_id, self.home, self.home_size
        if not isinstance(home, tuple):
            raise SpecError(f"{pid}.home", home, "must be a list or tuple of GPU ids")
        if len(set(home)) != len(home) or not all(is_int(g) and 0 <= g < topology.num_gpus for g in home):
            raise SpecError(f"{pid}.home", home, f"must be distinct GPU ids in [0, {topology.num_gpus})")
        if not is_int(size) or not 0 <= size <= topology.num_gpus:
            raise SpecError(f"{pid}.home_size", size, f"must be an integer in [0, {topology.num_gpus}]")
        if home and size and len(home) != size:
            raise SpecError(f"{pid}.home", home, f"has {len(home)} GPUs, home_size says {size}")
        scoped = [name for name, c in self.clusters.items() if c.scope]
        if scoped and not (home or size):
            raise SpecError(f"{pid}.clusters", scoped, "follow the home, but the pipeline has none")
        if not self.placed and (home or not size):
            raise SpecError(f"{pid}.clusters", scoped, "are unmapped, but the home is not a size to place")

    def _validate_adapters(self) -> None:
        pid = self.pipeline_id
        if not isinstance(self.adapters, tuple):
            raise SpecError(f"{pid}.adapters", self.adapters, "must be a list or tuple of adapter names")
        for adapter in self.adapters:
            if not isinstance(adapter, str) or not adapter.strip():
                raise SpecError(f"{pid}.adapters", adapter, "adapter names must be non-empty strings")
            if adapter == TOTAL_KEY:
                raise SpecError(f"{pid}.adapters", adapter, "is reserved for a pipeline-wide progress total")
        if self.kind is PipelineKind.MULTI_LORA:
            if not self.adapters:
                raise SpecError(f"{pid}.adapters", self.adapters, "a multi_lora pipeline needs adapters")
            if len(set(self.adapters)) != len(self.adapters):
                raise SpecError(f"{pid}.adapters", self.adapters, "duplicate adapter name")
        elif self.adapters:
            raise SpecError(f"{pid}.adapters", self.adapters, "only multi_lora pipelines have adapters")
        for value in self._per_adapter("max_staleness", self.max_staleness):
            if not is_int(value) or value < 0:
                raise SpecError(f"{pid}.max_staleness", value, "must be an integer >= 0")
        if self.num_steps is not None:
            for value in self._per_adapter("num_steps", self.num_steps):
                if not is_int(value) or value < 1:
                    raise SpecError(f"{pid}.num_steps", value, "must be None or an integer >= 1")

    def _per_adapter(self, name: str, values: Any) -> list[Any]:
        """The values of a field given once or per adapter; SpecError if a per-adapter dict
        does not name each adapter exactly once."""
        if not isinstance(values, dict):
            return [values]
        missing = set(self.adapter_names) - set(values)
        extra = set(values) - set(self.adapter_names)
        if missing or extra:
            raise SpecError(
                f"{self.pipeline_id}.{name}", values,
                f"must name each adapter once (missing {sorted(missing)}, unknown {sorted(extra)})",
            )
        return list(values.values())


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
