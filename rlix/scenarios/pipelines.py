"""A scenario's pipelines: kind, algorithm, model, home GPUs, clusters, batch, adapters.

The checks here are the ones a pipeline can make alone (kind vs adapters, ppo needs a critic,
kl needs a reference, known model size). Checks that need the topology or the other pipelines
(GPU ranges, TP bundles, homes overlapping, faults) are in `rlix.scenarios.checks`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from rlix.policy import ClusterSpec
from rlix.scenarios.errors import FieldProblem
from rlix.scenarios.gpusets import ClusterGpus, Home
from rlix.scenarios.models import MODELS, ModelShape
from rlix.scenarios.sections import (
    MAX_STEPS,
    MAX_TIME_S,
    MAX_TRAJECTORIES_PER_STEP,
    NAME_PATTERN,
    Section,
    TraceRef,
)


class ClusterConfig(Section):
    """A cluster: its tensor-parallel size and the GPUs it may use (its device mapping)."""

    tp: int = Field(1, gt=0)
    """Tensor-parallel size. For actor_infer, rollout rank r is the bundle gpus[r*tp:(r+1)*tp],
    which must lie on one node; training clusters (FSDP-style) normally use 1."""
    gpus: ClusterGpus
    """The device mapping, in order: a list of ids or a range string ("0-7", "0-3,8-11"); or
    `home` (the pipeline's home GPUs) or `pool` (the home's GPUs first, then every other GPU of
    the pool in whole TP bundles per node)."""

    @property
    def scope(self) -> str:
        """"home" or "pool" when the mapping follows the home, else ""."""
        return self.gpus if isinstance(self.gpus, str) else ""

    @property
    def listed(self) -> tuple[int, ...]:
        """The GPU ids the mapping lists (none when it follows the home)."""
        return () if isinstance(self.gpus, str) else self.gpus

    def spec(self) -> ClusterSpec:
        """The core's ClusterSpec (a cluster that follows the home is unmapped: see
        rlix.scenarios.specs for how it is resolved)."""
        if isinstance(self.gpus, str):
            return ClusterSpec(self.tp, (), self.gpus)
        return ClusterSpec(self.tp, self.gpus)


class ClustersConfig(Section):
    """The pipeline's clusters. actor_train and actor_infer always; critic and reference when
    the algorithm needs them."""

    actor_train: ClusterConfig
    """Actor training and old-policy log-probs (a gang: granted its whole mapping at once)."""
    actor_infer: ClusterConfig
    """Rollout (generation): data-parallel TP bundles that expand and shrink."""
    critic: ClusterConfig | None = None
    """Value compute and critic training; required by ppo, not allowed otherwise."""
    reference: ClusterConfig | None = None
    """Reference-model log-probs; required by kl: true, not allowed otherwise."""

    def present(self) -> dict[str, ClusterConfig]:
        """The clusters given, by name, in the order above."""
        return {name: c for name in type(self).model_fields if (c := getattr(self, name)) is not None}


class AdapterConfig(Section):
    """One LoRA adapter of a multi_lora pipeline. Omitted fields take the pipeline's value."""

    name: str = Field(pattern=NAME_PATTERN)
    """Adapter name, unique in its pipeline."""
    max_staleness: int = Field(ge=0)
    """Staleness bound k of this adapter (default: the pipeline's)."""
    steps: int = Field(gt=0, le=MAX_STEPS)
    """Train steps of this adapter (default: the pipeline's)."""
    trace: TraceRef
    """Rollout lengths of this adapter (default: the pipeline's)."""


#: Adapter fields that default to the pipeline field of the same name.
_INHERITED = ("max_staleness", "steps", "trace")


class PipelineConfig(Section):
    """One RL post-training pipeline."""

    id: str = Field(pattern=NAME_PATTERN)
    """Pipeline id, unique in the scenario."""
    kind: Literal["full_finetune", "multi_lora"]
    """full_finetune (one model trained) or multi_lora (adapters sharing one frozen base)."""
    algorithm: Literal["grpo", "ppo"] = "grpo"
    """grpo (group baseline, no critic) or ppo (needs a critic cluster; full_finetune only)."""
    kl: bool = False
    """KL penalty against a reference model (needs a reference cluster)."""
    model: str
    """Model size class of `rlix.scenarios.models.MODELS` (1.5b, 7b, 32b, 70b), for costs."""
    home: Home
    """The GPUs the pipeline would own without sharing (the static baseline): a GPU set, or a
    size (`home: 8`) that the policy places when it admits or starts the pipeline (whole nodes
    first, TP bundles inside a node). Homes may overlap: a pool may hold more pipelines than
    fit at once. With a GPU set, actor_train, critic and reference lie inside the home; with a
    size, every cluster says `gpus: home` or `gpus: pool`."""
    clusters: ClustersConfig
    """Device mappings and TP sizes of the pipeline's clusters."""
    prompts_per_step: int = Field(gt=0, le=MAX_TRAJECTORIES_PER_STEP)
    """Prompts per train step (per adapter step for multi_lora)."""
    samples_per_prompt: int = Field(gt=0, le=MAX_TRAJECTORIES_PER_STEP)
    """Responses sampled per prompt (the GRPO group size)."""
    steps: int = Field(gt=0, le=MAX_STEPS)
    """Train steps to run (per adapter for multi_lora, unless the adapter says otherwise)."""
    max_staleness: int = Field(0, ge=0)
    """Staleness bound k: step s trains on rollouts of weights >= s - k (0: on-policy)."""
    # Bounded: the run's figures multiply times by GPU counts (1e308 s overflowed them to inf),
    # and at 1e10 s (317 years) the clock still holds microseconds.
    arrival_s: float = Field(0.0, ge=0, le=MAX_TIME_S, allow_inf_nan=False)
    """When the pipeline is submitted, in seconds from the start of the run."""
    weight: float = Field(1.0, gt=0, allow_inf_nan=False)
    """Scales the pipeline's share of rollout GPUs (1.0: by remaining work alone)."""
    runtime_estimate_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    """The job's expected run time in seconds, as a Slurm user gives a time limit: what the
    policies that plan ahead are told (EASY backfill, rlix's shortest-first job order and its
    stacking of sized homes by runtime). Both drivers pass it on. Without it the simulator
    tells them the job's simulated time alone on its home, and a live run tells them nothing."""
    trace: TraceRef
    """Rollout lengths (default: the scenario's `trace`)."""
    adapters: list[AdapterConfig] = []
    """LoRA adapters (multi_lora only, at least one)."""

    @model_validator(mode="before")
    @classmethod
    def _inherit_into_adapters(cls, data: Any) -> Any:
        """Fill each adapter's omitted max_staleness, steps and trace from the pipeline."""
        if not isinstance(data, dict) or not isinstance(data.get("adapters"), list):
            return data
        defaults = {"max_staleness": cls.model_fields["max_staleness"].default}
        defaults.update({k: data[k] for k in _INHERITED if data.get(k) is not None})
        adapters = []
        for adapter in data["adapters"]:
            if isinstance(adapter, dict):
                given = {k: v for k, v in adapter.items() if not (k in _INHERITED and v is None)}
                adapter = {**defaults, **given}
            adapters.append(adapter)
        return {**data, "adapters": adapters}

    @field_validator("model")
    @classmethod
    def _known_model(cls, model: str) -> str:
        if model not in MODELS:
            raise ValueError(f"unknown model size class (known: {', '.join(MODELS)})")
        return model

    @model_validator(mode="after")
    def _consistent(self) -> PipelineConfig:
        self._check_adapters()
        if self.samples_per_step > MAX_TRAJECTORIES_PER_STEP:
            raise FieldProblem(("samples_per_prompt",), self.samples_per_prompt,
                               f"prompts_per_step x samples_per_prompt = {self.samples_per_step:,} trajectories "
                               f"a step, more than {MAX_TRAJECTORIES_PER_STEP:,}")
        clusters = self.clusters
        if self.algorithm == "ppo" and self.kind == "multi_lora":
            raise FieldProblem(("algorithm",), self.algorithm, "ppo is for full_finetune pipelines only")
        if self.algorithm == "ppo" and clusters.critic is None:
            raise FieldProblem(("clusters",), sorted(clusters.present()), "ppo needs a critic cluster")
        if self.algorithm != "ppo" and clusters.critic is not None:
            raise FieldProblem(("clusters", "critic"), clusters.critic.gpus, f"{self.algorithm} has no critic")
        if self.kl and clusters.reference is None:
            raise FieldProblem(("clusters",), sorted(clusters.present()), "kl: true needs a reference cluster")
        if not self.kl and clusters.reference is not None:
            raise FieldProblem(
                ("clusters", "reference"), clusters.reference.gpus, "a reference cluster is only used with kl: true"
            )
        return self

    def _check_adapters(self) -> None:
        if self.kind == "full_finetune" and self.adapters:
            raise FieldProblem(
                ("adapters",), [a.name for a in self.adapters], "only multi_lora pipelines have adapters"
            )
        if self.kind == "multi_lora" and not self.adapters:
            raise FieldProblem(("adapters",), [], "a multi_lora pipeline needs at least one adapter")
        seen: set[str] = set()
        for index, adapter in enumerate(self.adapters):
            if adapter.name in seen:
                raise FieldProblem(("adapters", index, "name"), adapter.name, "duplicate adapter name")
            seen.add(adapter.name)

    @property
    def shape(self) -> ModelShape:
        """The model size class's shape (layers, KV bytes per token, ...)."""
        return MODELS[self.model]

    @property
    def home_gpus(self) -> tuple[int, ...]:
        """The home's GPU ids; () for a home given as a size (placed by the policy)."""
        return () if isinstance(self.home, int) else self.home

    @property
    def home_size(self) -> int:
        """The number of GPUs of the home."""
        return self.home if isinstance(self.home, int) else len(self.home)

    @property
    def samples_per_step(self) -> int:
        """Trajectories per train step: prompts_per_step x samples_per_prompt."""
        return self.prompts_per_step * self.samples_per_prompt

    @property
    def staleness(self) -> int | dict[str, int]:
        """The bound as PipelineSpec takes it: one int, or one per adapter for multi_lora."""
        if self.kind == "multi_lora":
            return {a.name: a.max_staleness for a in self.adapters}
        return self.max_staleness

    @property
    def num_steps(self) -> int | dict[str, int]:
        """The step counts as PipelineSpec takes them: one int, or one per adapter."""
        if self.kind == "multi_lora":
            return {a.name: a.steps for a in self.adapters}
        return self.steps
