"""What a pipeline actor needs from the model side: its workload (the ML one, or the synthetic one).

The pipeline actor (`rlix.executor.pipeline`) is the same for every pipeline: it runs the
shared program, feeds rollout ranks from its queue, moves weights. What a stage computes,
which trainer and rollout engine it builds and what a batch's result is come from its
`Workload`, built in the pipeline actor from the picklable `PipelineSetup`:

- `rlix.executor.ml_workload.MlWorkload`: real models (tiny Qwen2 on CPU, or a local model),
  real GRPO/PPO/LoRA training, hf or vllm rollouts, task rewards;
- `rlix.executor.synthetic.SyntheticWorkload`: timed stages and synthetic tokens at a fixed
  rate, to exercise and benchmark the runtime itself (placement, grants, shrink and expand,
  re-queueing, weight transfer) in seconds and without torch.

A custom pipeline supplies its own workload class (any class with these methods).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlix.executor.trajectories import Trajectory
from rlix.executor.workers import Engine
from rlix.pipelines import ProgramConfig, Stage
from rlix.policy.specs import PipelineSpec


@dataclass(frozen=True)
class ResumeFrom:
    """Where a pipeline of a resumed run starts again (its program's `start_steps` say which
    step): the checkpoint its trainers load at init (None: from the start), the first
    trajectory id of each adapter (ids of the cut run are not reused) and the sequence number
    of its next checkpoint."""

    checkpoint: str | None
    first_ids: Mapping[str, int] = field(default_factory=dict)
    next_checkpoint: int = 1


@dataclass(frozen=True)
class PipelineSetup:
    """Everything a pipeline actor is built from (sent to it through Ray, so picklable)."""

    spec: PipelineSpec
    program: ProgramConfig
    #: The workload class (called with this setup inside the pipeline actor).
    workload: Callable[[PipelineSetup], Workload]
    #: Workload parameters (model folder, learning rates, task, stage times, ...).
    params: Mapping[str, Any] = field(default_factory=dict)
    #: Most trajectories a rollout rank generates in one call (a scenario's `engine.max_batch`).
    max_batch_per_rank: int = 8
    #: Take no more a call than an even share of the trajectories queued or running over the
    #: ranks (those loading too), as a load-balancing router in front of the ranks would (a
    #: scenario's `engine.balance`); False: each rank takes up to `max_batch_per_rank`.
    balance: bool = False
    #: Start every rank's worker (asleep, no weights) as part of the init, after the trainer,
    #: so a first expansion only loads weights instead of starting a process (False: a
    #: worker starts at its rank's first expansion, which then waits for it).
    prestart_workers: bool = True
    #: Report rollout progress to the core when this share of a batch is done (and at the end).
    progress_every: float = 0.1
    #: Where the trained models go after the last step (on the trainers' node); None: nowhere.
    models_dir: str | None = None
    #: Where this pipeline's checkpoints go (the program says when); None: not written.
    checkpoints_dir: str | None = None
    #: How many checkpoints are kept (the newest).
    keep_checkpoints: int = 2
    #: Set when the pipeline continues a cut run from a checkpoint.
    resume: ResumeFrom | None = None

    @property
    def pipeline_id(self) -> str:
        return self.spec.pipeline_id


class Workload(Protocol):
    #: The cluster whose trainer holds the weights the rollout ranks load.
    weights_cluster: str

    def make_batch(self, adapter: str, step: int, num_prompts: int, samples_per_prompt: int,
                   first_id: int) -> list[Trajectory]:
        """The trajectories of one rollout batch (ids from `first_id` on), not yet generated."""

    def weight_names(self) -> list[str]:
        """The weights exported (as version 0) once the weights cluster is initialized: the
        model for a full finetune; for multi-LoRA the frozen base and each adapter."""

    def engine_factory(self) -> Callable[[], Engine]:
        """Builds a rank's rollout engine inside its worker process (picklable)."""

    def trainer_factory(self, cluster: str, on_host: bool = False) -> Callable[[], Any]:
        """Builds the trainer of `cluster` inside its worker process (picklable). `on_host`:
        a prefetch, holding no GPU: the model is loaded into host memory only, and the init
        stage (`run_stage`) moves it onto the GPUs."""

    async def run_stage(self, stage: Stage, trainers: Mapping[str, Any], batch: list[Trajectory] | None) -> Any:
        """Run `stage` on the trainer actors (`cluster -> actor handle`); `batch` is the rollout
        batch of (stage.adapter, stage.step), None for init (which, for a trainer built
        `on_host`, takes its model onto the GPUs and off again)."""

    def batch_result(self, batch: list[Trajectory]) -> dict[str, Any]:
        """Score a complete batch (e.g. rewards into `extra`) and sum it up (`reward_mean`)."""

    async def save_models(self, trainers: Mapping[str, Any], folder: str) -> None:
        """Save what the pipeline trained into `folder` (its `models/<pipeline>/`), after its
        last step; a workload without models to keep does nothing."""

    async def models_from_checkpoint(self, checkpoint: str, folder: str) -> None:
        """Write into `folder` what `save_models` would have, from `checkpoint`, taken after the
        pipeline's last step (a resumed pipeline with nothing left to train starts no trainer)."""

    async def save_checkpoint(self, trainers: Mapping[str, Any], folder: str) -> dict[str, int]:
        """Save what continuing needs into `folder` (weights, optimizer and RNG states) and
        return each adapter's weight version; a workload may save nothing."""

    async def restore(self, cluster: str, trainer: Any, folder: str) -> None:
        """Load `cluster`'s part of the checkpoint in `folder` into its new trainer actor."""
