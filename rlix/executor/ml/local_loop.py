"""One GRPO / PPO / multi-LoRA step wired from the pieces, in a single process, without Ray.

This is the reference wiring: the Ray runtime runs the same calls as stages on different
actors, and the tests train with it. Stages are called in the pipeline program's order
(DESIGN.md, "The pipeline program"): rollout (priority 6), values (5, with a critic), old
log-probs (3), reference log-probs (4, when KL is on), critic training (2), actor training (1),
then the new weight version is pushed to the rollout backend.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedTokenizerBase

from rlix.executor.ml.actor import ActorTrainer
from rlix.executor.ml.algorithms import (
    gae,
    grpo_advantages,
    kl_k1,
    masked_mean,
    rewards_on_last_token,
    whiten,
)
from rlix.executor.ml.batch import TokenBatch, build_batch
from rlix.executor.ml.critic import CriticTrainer
from rlix.executor.ml.lora import MultiLoraTrainer
from rlix.executor.ml.reference import ReferenceModel
from rlix.executor.ml.registry import Prompt, RewardFn, Task
from rlix.executor.ml.rollout.base import (
    Completion,
    GenerationRequest,
    RolloutBackend,
    SamplingParams,
)


@dataclass(frozen=True)
class RolloutSettings:
    """A batch is num_prompts groups of samples_per_prompt responses (one GRPO group each)."""

    num_prompts: int = 4
    samples_per_prompt: int = 4
    max_new_tokens: int = 16
    sampling: SamplingParams = field(default_factory=SamplingParams)


@dataclass(frozen=True)
class Rollouts:
    """Scored responses, grouped by prompt: row g * samples_per_prompt + s is sample s of g."""

    prompts: list[Prompt]
    completions: list[Completion]
    texts: list[str]
    rewards: torch.Tensor  # [num_prompts, samples_per_prompt]
    batch: TokenBatch


def collect_rollouts(
    backend: RolloutBackend,
    tokenizer: PreTrainedTokenizerBase,
    task: Task,
    reward: RewardFn,
    settings: RolloutSettings,
    rng: random.Random,
    adapter: str | None = None,
    step: int = 0,
) -> Rollouts:
    """Sample prompts, generate every group on `backend`, decode and score the responses."""
    prompts = task.sample_prompts(settings.num_prompts, rng)
    requests = []
    for group, prompt in enumerate(prompts):
        prompt_ids = tuple(tokenizer.encode(prompt.text))
        for sample in range(settings.samples_per_prompt):
            requests.append(
                GenerationRequest(
                    request_id=f"{adapter or 'base'}-{step}-{group}-{sample}",
                    prompt_token_ids=prompt_ids,
                    max_new_tokens=settings.max_new_tokens,
                    adapter=adapter,
                    sampling=settings.sampling,
                )
            )
    completions = backend.generate(requests)
    unfinished = [c.request_id for c in completions if not c.finished]
    if unfinished:
        raise RuntimeError(f"collect_rollouts: interrupted requests {unfinished[:3]}")
    texts = [
        str(tokenizer.decode(list(c.token_ids), skip_special_tokens=True)) for c in completions
    ]
    scores = [
        reward(prompts[index // settings.samples_per_prompt], text)
        for index, text in enumerate(texts)
    ]
    rewards = torch.tensor(scores, dtype=torch.float32).view(
        settings.num_prompts, settings.samples_per_prompt
    )
    batch = build_batch(
        [r.prompt_token_ids for r in requests],
        [c.token_ids for c in completions],
        pad_token_id=_pad_id(tokenizer),
    )
    return Rollouts(prompts, completions, texts, rewards, batch)


def grpo_step(
    actor: ActorTrainer,
    backend: RolloutBackend,
    tokenizer: PreTrainedTokenizerBase,
    task: Task,
    reward: RewardFn,
    settings: RolloutSettings,
    rng: random.Random,
    reference: ReferenceModel | None = None,
) -> dict[str, float]:
    """Rollout, group advantages, (reference log-probs), old log-probs, train, push weights."""
    rollouts = collect_rollouts(backend, tokenizer, task, reward, settings, rng, step=actor.version)
    advantages = grpo_advantages(rollouts.rewards).flatten()
    old_log_probs = actor.old_log_probs(rollouts.batch)
    ref_log_probs = reference.log_probs(rollouts.batch) if reference is not None else None
    metrics = actor.train_step(rollouts.batch, advantages, old_log_probs, ref_log_probs)
    backend.update_weights(actor.state_dict_for_inference())
    return {**_rollout_metrics(rollouts), **metrics}


def ppo_step(
    actor: ActorTrainer,
    critic: CriticTrainer,
    reference: ReferenceModel,
    backend: RolloutBackend,
    tokenizer: PreTrainedTokenizerBase,
    task: Task,
    reward: RewardFn,
    settings: RolloutSettings,
    rng: random.Random,
    kl_reward_coef: float = 0.05,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> dict[str, float]:
    """PPO with a critic: the k1 KL to the reference is folded into per-token rewards, GAE
    gives advantages (whitened) and returns, the critic trains before the actor."""
    rollouts = collect_rollouts(backend, tokenizer, task, reward, settings, rng, step=actor.version)
    batch = rollouts.batch
    mask = batch.response_mask
    values = critic.values(batch)
    old_log_probs = actor.old_log_probs(batch)
    ref_log_probs = reference.log_probs(batch)
    kl = kl_k1(old_log_probs, ref_log_probs) * mask
    token_rewards = rewards_on_last_token(rollouts.rewards.flatten(), mask) - kl_reward_coef * kl
    advantages, returns = gae(token_rewards, values, mask, gamma, lam)
    critic_metrics = critic.train_step(batch, returns, values)
    actor_metrics = actor.train_step(batch, whiten(advantages, mask), old_log_probs)
    backend.update_weights(actor.state_dict_for_inference())
    return {
        **_rollout_metrics(rollouts),
        **actor_metrics,
        "value_loss": critic_metrics["value_loss"],
        "kl_to_reference": float(masked_mean(kl, mask)),
    }


def lora_grpo_step(
    trainer: MultiLoraTrainer,
    adapter: str,
    backend: RolloutBackend,
    tokenizer: PreTrainedTokenizerBase,
    task: Task,
    reward: RewardFn,
    settings: RolloutSettings,
    rng: random.Random,
) -> dict[str, float]:
    """GRPO on one adapter; its new version is pushed to the backend (the base is untouched)."""
    step = trainer.versions[adapter]
    rollouts = collect_rollouts(backend, tokenizer, task, reward, settings, rng, adapter, step)
    advantages = grpo_advantages(rollouts.rewards).flatten()
    old_log_probs = trainer.old_log_probs(adapter, rollouts.batch)
    metrics = trainer.train_step(adapter, rollouts.batch, advantages, old_log_probs)
    backend.update_adapter(trainer.adapter_state(adapter))
    return {**_rollout_metrics(rollouts), **metrics}


def _rollout_metrics(rollouts: Rollouts) -> dict[str, float]:
    lengths = rollouts.batch.response_mask.sum(dim=1)
    return {
        "reward_mean": float(rollouts.rewards.mean()),
        "response_tokens_mean": float(lengths.mean()),
        "rollout_weight_version": float(min(c.weight_version for c in rollouts.completions)),
    }


def _pad_id(tokenizer: PreTrainedTokenizerBase) -> int:
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise ValueError("tokenizer has neither a pad nor an end-of-sequence token")
    return int(pad)
