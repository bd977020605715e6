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
        # The core keeps the spec for the pipeline's life: a dict its caller goes on using
        # (the clusters dict edited for the next pipeline) must not change a frozen spec.
        for name in ("clusters", "max_staleness", "num_steps"):
            value = getattr(self, name)
            if isinstance(value, dict):
                object.__setattr__(self, name, dict(value))
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
        if not self.placed:
            # The core places a sized home in aligned chunks of the lcm of the TP sizes that
            # follow it, each inside one node: a size no empty pool holds would leave the
            # pipeline waiting for its turn for ever.
            from rlix.policy.homes import max_placeable, placement_unit  # homes imports this module

            unit = placement_unit(self)
            most = max_placeable(unit, topology)
            if size % unit or size > most:
                raise SpecError(
                    f"{pid}.home_size", size,
                    f"cannot be placed in whole TP bundles of {unit} GPU(s) inside {topology.gpus_per_node}-GPU "
                    f"nodes (TP sizes {sorted({self.clusters[name].tp for name in scoped})}; at most {most} GPUs, "
                    f"a multiple of {unit})",
                )

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
