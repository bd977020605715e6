"""What a pipeline program needs to know about its pipeline (plain data, standard library only).

Built from a scenario by `rlix.scenarios`; the policy core sees the pipeline's `PipelineSpec`,
the program sees this.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlix.policy.specs import BASE_ADAPTER, PipelineKind


@dataclass(frozen=True, slots=True)
class AdapterConfig:
    """One model being trained: the full model of a full-finetune pipeline (named `base`) or one
    LoRA adapter of a multi-LoRA pipeline; each has its own steps and staleness bound."""

    name: str = BASE_ADAPTER
    num_steps: int = 1
    max_staleness: int = 0


@dataclass(frozen=True, slots=True)
class ProgramConfig:
    pipeline_id: str
    kind: PipelineKind
    adapters: tuple[AdapterConfig, ...] = field(default_factory=lambda: (AdapterConfig(),))
    num_prompts: int = 1
    samples_per_prompt: int = 1
    #: PPO with a critic (value compute and critic training) instead of GRPO.
    has_critic: bool = False
    #: A KL term against a reference model (reference log-probs).
    has_reference: bool = False
    #: Checkpoint after every this many steps of an adapter (0: never).
    checkpoint_every: int = 0
    #: (adapter, first step) of a pipeline resumed from a checkpoint: its earlier steps are
    #: done and their weight versions exist; adapters not named start at step 0.
    start_steps: tuple[tuple[str, int], ...] = ()
    #: Read each init cluster's weights into host memory before asking for its GPUs
    #: (`ops.Prefetch`), so the init holds them only to copy the weights in and set up; set
    #: by the drivers from the policy (`Policy.prefetches_weights`).
    prefetch_weights: bool = False

    def first_step(self, adapter: str) -> int:
        return dict(self.start_steps).get(adapter, 0)

    @property
    def finished(self) -> bool:
        """Every adapter starts past its last step: a pipeline resumed from a checkpoint of its
        last step, with nothing left to train."""
        return all(self.first_step(a.name) >= a.num_steps for a in self.adapters)

    def checkpoints_after(self, step: int) -> bool:
        """Whether step `step` (0-based) of an adapter ends with a checkpoint."""
        return self.checkpoint_every > 0 and (step + 1) % self.checkpoint_every == 0

    @property
    def batch_size(self) -> int:
        return self.num_prompts * self.samples_per_prompt

    @property
    def init_clusters(self) -> tuple[str, ...]:
        """Clusters that load a model at priority 0 before the first step. Rollout ranks are
        not among them: a rank loads the newest weights when it expands."""
        clusters = ["actor_train"]
        if self.has_critic:
            clusters.append("critic")
        if self.has_reference:
            clusters.append("reference")
        return tuple(clusters)
