"""A scenario pipeline as its program's configuration (`rlix.pipelines.ProgramConfig`).

Both drivers build each pipeline's program from this, so they run the same step sequence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlix.pipelines.config import AdapterConfig, ProgramConfig
from rlix.policy.specs import BASE_ADAPTER, PipelineKind

if TYPE_CHECKING:
    from rlix.scenarios.pipelines import PipelineConfig


def program_config(pipeline: PipelineConfig, checkpoint_every: int = 0) -> ProgramConfig:
    """`checkpoint_every` is the scenario's (its `executor:` section): both drivers checkpoint
    at the same steps, the simulator charging what writing one would cost."""
    kind = PipelineKind(pipeline.kind)
    if kind is PipelineKind.MULTI_LORA:
        adapters = tuple(AdapterConfig(a.name, a.steps, a.max_staleness) for a in pipeline.adapters)
    else:
        adapters = (AdapterConfig(BASE_ADAPTER, pipeline.steps, pipeline.max_staleness),)
    return ProgramConfig(
        pipeline_id=pipeline.id,
        kind=kind,
        adapters=adapters,
        num_prompts=pipeline.prompts_per_step,
        samples_per_prompt=pipeline.samples_per_prompt,
        has_critic=pipeline.algorithm == "ppo",
        has_reference=pipeline.kl,
        checkpoint_every=checkpoint_every,
    )
