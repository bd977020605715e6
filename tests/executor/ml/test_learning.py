"""End to end without Ray: the toy task's reward rises under GRPO, under PPO with a critic, and
for each adapter under multi-LoRA GRPO.

Fixed seeds; the tiny model starts from random weights. The reward is `letter_closeness` (see
rlix.executor.ml.toy_tasks): about 0.22 for random bytes, 1.0 for answering with the letter.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rlix.executor.ml.actor import ActorTrainer  # noqa: E402
from rlix.executor.ml.critic import CriticTrainer  # noqa: E402
from rlix.executor.ml.local_loop import (  # noqa: E402
    RolloutSettings,
    grpo_step,
    lora_grpo_step,
    ppo_step,
)
from rlix.executor.ml.lora import LoraSettings, MultiLoraTrainer  # noqa: E402
from rlix.executor.ml.reference import ReferenceModel  # noqa: E402
from rlix.executor.ml.registry import get_reward, get_task  # noqa: E402
from rlix.executor.ml.rollout import make_backend  # noqa: E402
from rlix.executor.ml.tokenizer import load_tokenizer  # noqa: E402

SETTINGS = RolloutSettings(num_prompts=4, samples_per_prompt=4, max_new_tokens=16)
NUM_STEPS = 12
# The multi-LoRA settings of the bundled cpu-demo scenario (default targets: attention + lm_head).
LORA_LR = 3e-2
LORA = LoraSettings(rank=8, alpha=16)


def test_grpo_raises_the_reward(tiny_model_path: Path) -> None:
    torch.manual_seed(0)
    rng = random.Random(0)
    task = get_task("say_letter")
    reward = get_reward(task.default_reward)
    tokenizer = load_tokenizer(tiny_model_path)
    actor = ActorTrainer(tiny_model_path, lr=1e-2)
    backend = make_backend("hf", str(tiny_model_path), chunk_tokens=16, enable_lora=True)
    backend.load(actor.state_dict_for_inference())
    history = [
        grpo_step(actor, backend, tokenizer, task, reward, SETTINGS, rng) for _ in range(NUM_STEPS)
    ]
    rewards = [m["reward_mean"] for m in history]
    assert sum(rewards[-3:]) / 3 > rewards[0] + 0.3, rewards
    # Every rollout used the weights of the step before it (staleness 0, pushed each step).
    assert [m["rollout_weight_version"] for m in history] == list(range(NUM_STEPS))


def test_ppo_with_critic_and_kl_raises_the_reward(tiny_model_path: Path) -> None:
    torch.manual_seed(1)
    rng = random.Random(1)
    task = get_task("say_letter")
    reward = get_reward(task.default_reward)
    tokenizer = load_tokenizer(tiny_model_path)
    actor = ActorTrainer(tiny_model_path, lr=1e-2)
    critic = CriticTrainer(tiny_model_path, lr=3e-3)
    reference = ReferenceModel(tiny_model_path)
    backend = make_backend("hf", str(tiny_model_path), chunk_tokens=16, enable_lora=True)
    backend.load()
    history = [
        # lam = 1: Monte-Carlo advantages, so the freshly initialised critic is a baseline
        # and not yet a source of bias.
        ppo_step(
            actor,
            critic,
            reference,
            backend,
            tokenizer,
            task,
            reward,
            SETTINGS,
            rng,
            kl_reward_coef=0.01,
            lam=1.0,
        )
        for _ in range(NUM_STEPS)
    ]
    rewards = [m["reward_mean"] for m in history]
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.2, rewards
    assert history[0]["kl_to_reference"] == pytest.approx(0.0, abs=1e-6)
    assert history[-1]["kl_to_reference"] > 0.0  # the policy moved away from the reference
    assert all(m["value_loss"] == m["value_loss"] for m in history)  # never NaN


def test_multi_lora_grpo_raises_each_adapters_reward(tiny_model_path: Path) -> None:
    torch.manual_seed(0)
    rng = random.Random(0)
    task = get_task("say_letter")
    reward = get_reward(task.default_reward)
    tokenizer = load_tokenizer(tiny_model_path)
    trainer = MultiLoraTrainer(tiny_model_path, ["alpha", "beta"], lr=LORA_LR, lora=LORA)
    backend = make_backend("hf", str(tiny_model_path), chunk_tokens=16, enable_lora=True)
    backend.load()
    for adapter in trainer.adapters:
        backend.update_adapter(trainer.adapter_state(adapter))
    history: dict[str, list[dict[str, float]]] = {name: [] for name in trainer.adapters}
    for _ in range(NUM_STEPS):
        for adapter in trainer.adapters:  # interleaved, as two pipelines sharing the base
            history[adapter].append(
                lora_grpo_step(trainer, adapter, backend, tokenizer, task, reward, SETTINGS, rng)
            )
    for adapter, metrics in history.items():
        rewards = [m["reward_mean"] for m in metrics]
        assert sum(rewards[-3:]) / 3 > rewards[0] + 0.3, (adapter, rewards)
        assert [m["rollout_weight_version"] for m in metrics] == list(range(NUM_STEPS))
