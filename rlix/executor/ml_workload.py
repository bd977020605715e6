"""The ML workload: real models, real RL steps, wired as `rlix.executor.ml.local_loop` wires them.

The pieces are the ML package's (`rlix.executor.ml`): tasks and rewards from its registry, the
tiny Qwen2 or a local model folder, `ActorTrainer` / `CriticTrainer` / `ReferenceModel` /
`MultiLoraTrainer`, the `hf` (or lazily `vllm`) rollout backend. Here they are spread over the
executor's actors, one stage per call, in the program's order:

- rollout: each trajectory is one `GenerationRequest`, resumed from its prefix after a
  preemption; when a batch is complete the pipeline actor decodes and scores it and builds its
  token batch (GRPO advantages are computed here, on the CPU);
- values (critic), old log-probs (actor_train), reference log-probs (reference): forward passes
  on the trainer actors, results kept per (adapter, step);
- critic training (PPO: GAE over KL-folded token rewards, as `ppo_step`), actor training (one
  adapter only for multi-LoRA);
- publish: the trainer's host copy (`FullWeights`, or one adapter's `AdapterWeights`) goes to
  the object store and from there to the rollout ranks (an adapter without reloading the base).

Each trainer call onloads the model, computes, and offloads it again, so a released cluster
leaves nothing on its GPUs.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from rlix.executor.trajectories import Trajectory
from rlix.executor.workers import Engine
from rlix.executor.workload import PipelineSetup
from rlix.pipelines import Stage
from rlix.policy.specs import WEIGHTS_CLUSTER, PipelineKind

#: The RNG states in a checkpoint folder (torch and Python's `random` of the trainer process).
RNG_FILE = "rng.pt"
#: Parameters a scenario's `executor:` section (and the pipeline) give the ML workload.
DEFAULTS: dict[str, Any] = {
    "model_path": None, "backend": "hf", "actor_lr": 1e-5, "critic_lr": 1e-5, "lora_lr": 1e-4,
    "lora_rank": 8, "lora_alpha": 16.0, "kl_coef": 1e-3, "clip_ratio": 0.2, "max_new_tokens": 64,
    "temperature": 1.0, "task": "say_letter", "reward": None, "seed": 0, "algorithm": "grpo", "kl": False,
    "chunk_tokens": 8, "device": None,
}


def _device(params: Mapping[str, Any]) -> str:
    if params.get("device"):
        return str(params["device"])
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class MlEngine:
    """The executor's `Engine` over a `RolloutBackend` of the ML package."""

    def __init__(self, params: Mapping[str, Any], lora: bool) -> None:
        from rlix.executor.ml.rollout.base import SamplingParams

        self.params = params
        self.lora = lora
        self.sampling = SamplingParams(temperature=float(params["temperature"]))
        if params["backend"] == "vllm":
            from rlix.executor.ml.rollout.vllm_backend import VllmBackend

            self.backend: Any = VllmBackend(params["model_path"], enable_lora=lora,
                                            max_lora_rank=max(16, int(params["lora_rank"])))
        else:
            from rlix.executor.ml.rollout.hf import HfBackend

            self.backend = HfBackend(params["model_path"], device=_device(params),
                                     chunk_tokens=int(params["chunk_tokens"]), enable_lora=lora)

    def _install(self, state: Any) -> None:
        from rlix.executor.ml.rollout.base import AdapterWeights

        if isinstance(state, AdapterWeights):
            self.backend.update_adapter(state)
        else:
            self.backend.update_weights(state)

    def load(self, weights: dict[str, tuple[int, Any]]) -> None:
        from rlix.executor.ml.rollout.base import AdapterWeights

        full = [s for _v, s in weights.values() if not isinstance(s, AdapterWeights)]
        for _version, state in weights.values():
            if isinstance(state, AdapterWeights):
                self.backend.update_adapter(state)  # kept on the host, installed by load()
        self.backend.load(full[0] if full else None)

    def update(self, adapter: str, version: int, state: Any) -> None:
        self._install(state)

    def unload(self) -> None:
        self.backend.offload()

    def generate(self, items: list[Trajectory], should_stop: Callable[[], bool]) -> list[int]:
        from rlix.executor.ml.rollout.base import GenerationRequest

        requests = [
            GenerationRequest(
                request_id=f"{t.adapter}/{t.step}/{t.trajectory_id}",
                prompt_token_ids=tuple(t.prompt["ids"]),
                max_new_tokens=int(self.params["max_new_tokens"]),
                prefix_token_ids=tuple(t.response),
                prefix_log_probs=tuple(t.extra.get("log_probs", ())),
                adapter=t.adapter if self.lora else None,
                sampling=self.sampling,
            )
            for t in items
        ]
        completions = self.backend.generate(requests, should_stop)
        for t, c in zip(items, completions, strict=True):
            t.response = list(c.token_ids)
            t.extra["log_probs"] = list(c.log_probs)
            t.done = c.finished
        return [c.num_prefix_tokens for c in completions]


class MlTrainer:
    """The trainer of one cluster; `run` onloads, computes one stage, offloads."""

    def __init__(self, params: Mapping[str, Any], cluster: str, adapters: list[str] | None,
                 on_host: bool = False) -> None:
        from rlix.executor.ml.policy_update import PolicyLossSettings

        path, device = params["model_path"], _device(params)
        # `on_host`: a prefetch, holding no GPU: the model is built in host memory, and
        # `stage_in` (the init) takes it to `device`, where every later stage runs.
        self.on_host = on_host
        built_on = "cpu" if on_host else device
        # The KL term is in the GRPO loss only with a reference (PPO folds it into rewards).
        in_loss = params["kl"] and params["algorithm"] != "ppo"
        loss = PolicyLossSettings(clip_eps=float(params["clip_ratio"]),
                                  kl_coef=float(params["kl_coef"]) if in_loss else 0.0)
        if cluster == "critic":
            from rlix.executor.ml.critic import CriticTrainer

            self.model: Any = CriticTrainer(path, lr=float(params["critic_lr"]), device=built_on)
        elif cluster == "reference":
            from rlix.executor.ml.reference import ReferenceModel

            self.model = ReferenceModel(path, device=built_on)
        elif adapters:
            from rlix.executor.ml.lora import LoraSettings, MultiLoraTrainer

            lora = LoraSettings(rank=int(params["lora_rank"]), alpha=int(params["lora_alpha"]))
            self.model = MultiLoraTrainer(path, adapters, lr=float(params["lora_lr"]), lora=lora,
                                          loss=loss, device=built_on)
        else:
            from rlix.executor.ml.actor import ActorTrainer

            self.model = ActorTrainer(path, lr=float(params["actor_lr"]), loss=loss, device=built_on)
        self.model.device = device
        if not on_host:
            self.model.offload()

    def stage_in(self) -> None:
        """The init of a prefetched trainer: its model onto the GPUs (buffers allocated there),
        then off again, as every stage leaves it; nothing for one loaded at its start."""
        if self.on_host:
            self.model.onload()
            self.model.offload()
            self.on_host = False

    def run(self, method: str, *args: Any) -> Any:
        self.model.onload()
        try:
            return getattr(self.model, method)(*args)
        finally:
            self.model.offload()

    def save_final(self, folder: str) -> None:
        """The trained model as a loadable folder (`from_pretrained`), from its host copy: the
        cluster's GPUs are not held after the last step, so nothing is onloaded."""
        self.model.save(folder)

    def save_checkpoint(self, folder: str) -> dict[str, int]:
        """`save_final` plus this process's RNG states; returns the weight version of each
        adapter ({"base": v} for a full finetune)."""
        import os
        import random

        import torch

        self.model.save(folder)
        torch.save({"torch": torch.get_rng_state(), "python": random.getstate()}, os.path.join(folder, RNG_FILE))
        versions = getattr(self.model, "versions", None)
        return dict(versions) if versions is not None else {"base": int(getattr(self.model, "version", 0))}

    def load_checkpoint(self, folder: str) -> None:
        """What `save_checkpoint` wrote: weights, optimizer state, versions, RNG states."""
        import os
        import random

        import torch

        self.model.load(folder)
        self.model.offload()  # its optimizer state may have been loaded onto the device
        rng = os.path.join(folder, RNG_FILE)
        if os.path.exists(rng):
            states = torch.load(rng, weights_only=False)
            torch.set_rng_state(states["torch"])
            random.setstate(states["python"])

    def export_weights(self, adapter: str) -> Any:
        if hasattr(self.model, "adapter_state"):
            return self.model.adapter_state(adapter)
        return self.model.state_dict_for_inference()


@dataclass
class _StepState:
    """What the stages of one (adapter, step) hand each other."""

    batch: Any = None
    rewards: Any = None
    advantages: Any = None
    values: Any = None
    old_log_probs: Any = None
    ref_log_probs: Any = None
    returns: Any = None
    metrics: dict[str, float] = field(default_factory=dict)


class MlWorkload:
    weights_cluster = WEIGHTS_CLUSTER

    def __init__(self, setup: PipelineSetup) -> None:
        from rlix.executor.ml.registry import get_reward, get_task
        from rlix.executor.ml.tokenizer import load_tokenizer

        self.setup = setup
        self.params = {**DEFAULTS, **setup.params}
        if not self.params["model_path"]:
            raise ValueError("ML workload: params.model_path is required (a prepared model folder)")
        self.lora = setup.program.kind is PipelineKind.MULTI_LORA
        # The driver resolves names in its registry and sends the objects (`task_object`,
        # `reward_fn`): a task registered in the driver's script is unknown in this process.
        self.task = self.params.get("task_object") or get_task(self.params["task"])
        self.reward = self.params.get("reward_fn") or get_reward(self.params["reward"] or self.task.default_reward)
        self.tokenizer = load_tokenizer(self.params["model_path"])
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.tokenizer.eos_token_id)
        self.states: dict[tuple[str, int], _StepState] = {}

    def weight_names(self) -> list[str]:
        return [a.name for a in self.setup.program.adapters]

    def engine_factory(self) -> Callable[[], Engine]:
        return partial(MlEngine, dict(self.params), self.lora)

    def trainer_factory(self, cluster: str, on_host: bool = False) -> Callable[[], Any]:
        adapters = self.weight_names() if self.lora and cluster == "actor_train" else None
        return partial(MlTrainer, dict(self.params), cluster, adapters, on_host)

    def make_batch(self, adapter: str, step: int, num_prompts: int, samples_per_prompt: int,
                   first_id: int) -> list[Trajectory]:
        seed = zlib.crc32(f"{self.params['seed']}/{self.setup.pipeline_id}/{adapter}/{step}".encode())
        prompts = self.task.sample_prompts(num_prompts, random.Random(seed))
        out = []
        for group, prompt in enumerate(prompts):
            ids = list(self.tokenizer.encode(prompt.text))
            for sample in range(samples_per_prompt):
                out.append(Trajectory(self.setup.pipeline_id, adapter, step,
                                      first_id + group * samples_per_prompt + sample, group,
                                      {"ids": ids, "text": prompt.text, "metadata": dict(prompt.metadata)},
                                      len(ids)))
        return out

    def batch_result(self, batch: list[Trajectory]) -> dict[str, Any]:
        import torch

        from rlix.executor.ml.algorithms import grpo_advantages
        from rlix.executor.ml.batch import build_batch
        from rlix.executor.ml.registry import Prompt

        batch = sorted(batch, key=lambda t: t.trajectory_id)
        texts = [str(self.tokenizer.decode(t.response, skip_special_tokens=True)) for t in batch]  # one sequence: one str
        scores = [self.reward(Prompt(t.prompt["text"], t.prompt["metadata"]), text) for t, text in zip(batch, texts, strict=True)]
        for t, score in zip(batch, scores, strict=True):
            t.extra["reward"] = score
        num_groups = 1 + max(t.group for t in batch)
        rewards = torch.tensor(scores, dtype=torch.float32).view(num_groups, -1)
        state = _StepState(batch=build_batch([t.prompt["ids"] for t in batch], [t.response for t in batch], self.pad_id),
                           rewards=rewards, advantages=grpo_advantages(rewards).flatten())
        self.states[(batch[0].adapter, batch[0].step)] = state
        lengths = state.batch.response_mask.sum(dim=1)
        return {"reward_mean": float(rewards.mean()), "response_tokens_mean": float(lengths.mean()),
                "rollout_weight_version": float(min(t.weight_version for t in batch))}

    async def run_stage(self, stage: Stage, trainers: Mapping[str, Any], batch: list[Trajectory] | None) -> Any:
        trainer = trainers[stage.cluster]
        if stage.stage == "init":
            await trainer.call.remote("stage_in")
            return None
        state = self.states[(stage.adapter, stage.step)]
        lora_args = (stage.adapter,) if self.lora else ()
        if stage.stage == "values":
            state.values = await trainer.call.remote("run", "values", state.batch)
        elif stage.stage == "old_log_probs":
            state.old_log_probs = await trainer.call.remote("run", "old_log_probs", *lora_args, state.batch)
        elif stage.stage == "ref_log_probs":
            state.ref_log_probs = await trainer.call.remote("run", "log_probs", state.batch)
        elif stage.stage == "critic_train":
            self._gae(state)
            metrics = await trainer.call.remote("run", "train_step", state.batch, state.returns, state.values)
            state.metrics.update({f"critic_{k}": v for k, v in metrics.items()})
        elif stage.stage == "actor_train":
            # PPO folded the KL into its rewards; GRPO puts it in the loss.
            ref = state.ref_log_probs if self.params["algorithm"] != "ppo" else None
            metrics = await trainer.call.remote("run", "train_step", *lora_args, state.batch, state.advantages,
                                                state.old_log_probs, ref)
            del self.states[(stage.adapter, stage.step)]
            return {k: float(v) for k, v in metrics.items()}
        else:
            raise ValueError(f"ML workload: unknown stage {stage.stage!r}")
        return None

    async def save_models(self, trainers: Mapping[str, Any], folder: str) -> None:
        """`folder` gets the actor (a model folder; for multi-LoRA a PEFT adapter folder per
        adapter, `folder/<adapter>/`) and, for PPO, the critic in `folder/critic/`."""
        await self._save(trainers, folder, "save_final")

    async def models_from_checkpoint(self, checkpoint: str, folder: str) -> None:
        """A checkpoint holds the folders `save_models` writes, each with its process's RNG
        states beside it (`save_checkpoint`); those and the checkpoint's metadata stay out."""
        import shutil

        from rlix.executor.checkpoints import CHECKPOINT_FILE

        shutil.copytree(checkpoint, folder, ignore=shutil.ignore_patterns(RNG_FILE, CHECKPOINT_FILE),
                        dirs_exist_ok=True)

    async def save_checkpoint(self, trainers: Mapping[str, Any], folder: str) -> dict[str, int]:
        """The same folders with RNG states; returns each adapter's weight version."""
        return await self._save(trainers, folder, "save_checkpoint")

    async def restore(self, cluster: str, trainer: Any, folder: str) -> None:
        """The actor's state from `folder`, the critic's from `folder/critic` (the reference is
        frozen: nothing to load)."""
        import os

        if cluster == "actor_train":
            await trainer.call.remote("load_checkpoint", folder)
        elif cluster == "critic":
            await trainer.call.remote("load_checkpoint", os.path.join(folder, "critic"))

    async def _save(self, trainers: Mapping[str, Any], folder: str, method: str) -> dict[str, int]:
        import os

        os.makedirs(folder, exist_ok=True)
        versions: dict[str, int] = {}
        if "actor_train" in trainers:
            versions = await trainers["actor_train"].call.remote(method, folder) or {}
        if "critic" in trainers:
            await trainers["critic"].call.remote(method, os.path.join(folder, "critic"))
        return versions

    def _gae(self, state: _StepState) -> None:
        """PPO advantages and returns (as `local_loop.ppo_step`): KL-folded token rewards, GAE."""
        from rlix.executor.ml.algorithms import gae, kl_k1, rewards_on_last_token, whiten

        mask = state.batch.response_mask
        token_rewards = rewards_on_last_token(state.rewards.flatten(), mask)
        if state.ref_log_probs is not None:
            token_rewards = token_rewards - float(self.params["kl_coef"]) * kl_k1(state.old_log_probs, state.ref_log_probs) * mask
        advantages, returns = gae(token_rewards, state.values, mask, 1.0, 0.95)
        state.advantages, state.returns = whiten(advantages, mask), returns
