"""The full-finetune actor, the critic and the reference: steps, versions, snapshots, checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rlix.executor.ml.actor import ActorTrainer  # noqa: E402
from rlix.executor.ml.batch import TokenBatch, build_batch  # noqa: E402
from rlix.executor.ml.critic import CriticTrainer  # noqa: E402
from rlix.executor.ml.policy_update import PolicyLossSettings  # noqa: E402
from rlix.executor.ml.reference import ReferenceModel  # noqa: E402
from rlix.executor.ml.rollout.base import GenerationRequest, SamplingParams  # noqa: E402
from rlix.executor.ml.rollout.hf import HfBackend  # noqa: E402


def small_batch() -> TokenBatch:
    prompts = [list(b"say a:"), list(b"say b:"), list(b"say c:")]
    responses = [list(b"aaaa"), list(b"xy"), list(b"ccc")]
    return build_batch(prompts, responses, pad_token_id=257)


def params_equal(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(
        torch.equal(x, y)
        for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


def test_actor_step_bumps_version_and_snapshot_is_a_host_copy(tiny_model_path: Path) -> None:
    actor = ActorTrainer(tiny_model_path, lr=1e-3)
    batch = small_batch()
    old = actor.old_log_probs(batch)
    assert old.device.type == "cpu" and old[batch.response_mask == 0].abs().max() == 0
    snapshot = actor.state_dict_for_inference()
    assert snapshot.version == 0
    metrics = actor.train_step(batch, torch.tensor([1.0, -1.0, 0.5]), old)
    assert metrics["version"] == 1.0 and actor.version == 1
    assert metrics["clip_fraction"] == 0.0  # ratio is exactly 1 before the first update
    assert metrics["approx_kl"] == 0.0
    # The snapshot taken before the step did not move with the weights.
    changed = [
        n for n, t in actor.model.state_dict().items() if not torch.equal(t, snapshot.state_dict[n])
    ]
    assert changed
    # The update raised the log-prob of the positively rewarded response and lowered the other.
    new = actor.old_log_probs(batch)
    gain = ((new - old) * batch.response_mask).sum(dim=1)
    assert gain[0] > 0 > gain[1]


def test_micro_batches_give_the_same_step(tiny_model_path: Path) -> None:
    batch = small_batch()
    whole = ActorTrainer(tiny_model_path, lr=1e-3)
    split = ActorTrainer(tiny_model_path, lr=1e-3, micro_batch_size=1)
    # SGD, so parameter changes are the gradients themselves (Adam's first step is about
    # lr * sign(grad), which turns float noise on near-zero gradients into lr-sized jumps).
    for trainer in (whole, split):
        trainer.optimizer = torch.optim.SGD(trainer.model.parameters(), lr=1.0)
    advantages = torch.tensor([1.0, -1.0, 0.5])
    old = whole.old_log_probs(batch)
    a = whole.train_step(batch, advantages, old)
    b = split.train_step(batch, advantages, old)
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
    assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)
    for (name, x), y in zip(
        whole.model.state_dict().items(), split.model.state_dict().values(), strict=True
    ):
        assert torch.allclose(x, y, atol=1e-5), name


def test_kl_needs_reference_and_starts_at_zero(tiny_model_path: Path) -> None:
    batch = small_batch()
    actor = ActorTrainer(tiny_model_path, lr=1e-3, loss=PolicyLossSettings(kl_coef=0.1))
    reference = ReferenceModel(tiny_model_path)
    old = actor.old_log_probs(batch)
    with pytest.raises(ValueError, match="needs ref_log_probs"):
        actor.train_step(batch, torch.ones(3), old)
    ref = reference.log_probs(batch)
    assert torch.equal(ref, old)  # same weights before training
    first = actor.train_step(batch, torch.tensor([1.0, -1.0, 0.5]), old, ref)
    assert first["kl"] == pytest.approx(0.0, abs=1e-7)
    second = actor.train_step(batch, torch.tensor([1.0, -1.0, 0.5]), old, ref)
    assert second["kl"] > 0.0
    # The reference never moves.
    assert torch.equal(reference.log_probs(batch), ref)


def test_actor_checkpoint_round_trip(tiny_model_path: Path, tmp_path: Path) -> None:
    batch = small_batch()
    advantages = torch.tensor([1.0, -1.0, 0.5])
    actor = ActorTrainer(tiny_model_path, lr=1e-3)
    for _ in range(2):
        actor.train_step(batch, advantages, actor.old_log_probs(batch))
    actor.save(tmp_path / "ckpt")
    restored = ActorTrainer(tiny_model_path, lr=1e-3)
    restored.load(tmp_path / "ckpt")
    assert restored.version == 2 and params_equal(actor.model, restored.model)
    # Optimizer state came back too: the next steps are identical.
    actor.train_step(batch, advantages, actor.old_log_probs(batch))
    restored.train_step(batch, advantages, restored.old_log_probs(batch))
    assert params_equal(actor.model, restored.model)
    with pytest.raises(FileNotFoundError, match="trainer_state.json"):
        restored.load(tmp_path)


def test_rollout_log_probs_match_the_trainer(tiny_model_path: Path) -> None:
    """The hf backend's raw log-probs equal the actor's for the same tokens and version."""
    actor = ActorTrainer(tiny_model_path, lr=1e-3)
    batch = small_batch()
    actor.train_step(batch, torch.tensor([1.0, -1.0, 0.5]), actor.old_log_probs(batch))
    backend = HfBackend(tiny_model_path, chunk_tokens=3)
    backend.load(actor.state_dict_for_inference())
    prompt = tuple(b"say d:")
    [completion] = backend.generate(
        [GenerationRequest("r", prompt, 7, sampling=SamplingParams(temperature=1.0))]
    )
    assert completion.weight_version == 1
    replay = build_batch([list(prompt)], [list(completion.token_ids)], pad_token_id=257)
    expected = actor.old_log_probs(replay)[0, len(prompt) :]
    assert list(completion.log_probs) == pytest.approx(expected.tolist(), abs=1e-4)


def test_critic_values_and_training(tiny_model_path: Path, tmp_path: Path) -> None:
    batch = small_batch()
    critic = CriticTrainer(tiny_model_path, lr=3e-3)
    values = critic.values(batch)
    assert values.abs().max().item() == 0.0  # zero-initialised head
    returns = batch.response_mask * torch.tensor([[1.0], [-1.0], [0.5]])
    first = critic.train_step(batch, returns, values)
    for _ in range(30):
        last = critic.train_step(batch, returns, critic.values(batch))
    assert last["value_loss"] < 0.01 * first["value_loss"]
    assert critic.values(batch)[batch.response_mask == 0].abs().max().item() == 0.0
    critic.save(tmp_path / "critic")
    restored = CriticTrainer(tiny_model_path, lr=3e-3)
    restored.load(tmp_path / "critic")
    assert torch.equal(restored.values(batch), critic.values(batch))
    assert restored.num_steps == 31
