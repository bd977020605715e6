"""Multi-LoRA: a step touches only its adapter; adapters export to a rollout backend exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from rlix.executor.ml.batch import build_batch  # noqa: E402
from rlix.executor.ml.lora import MultiLoraTrainer  # noqa: E402
from rlix.executor.ml.rollout.base import GenerationRequest, SamplingParams  # noqa: E402
from rlix.executor.ml.rollout.hf import HfBackend  # noqa: E402

ADAPTERS = ["alpha", "beta", "gamma"]


def make_batch():  # type: ignore[no-untyped-def]
    return build_batch(
        [list(b"say a:"), list(b"say b:")], [list(b"aaab"), list(b"xyz")], pad_token_id=257
    )


def test_a_step_changes_only_its_adapter(tiny_model_path: Path) -> None:
    trainer = MultiLoraTrainer(tiny_model_path, ADAPTERS, lr=1e-2)
    batch = make_batch()
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    for _ in range(2):  # lora_B starts at zero, so lora_A only moves from the second step on
        old = trainer.old_log_probs("beta", batch)
        trainer.train_step("beta", batch, torch.tensor([1.0, -1.0]), old)
    after = dict(trainer.model.named_parameters())
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    beta = {n for n in before if ".beta." in n}
    assert changed, "the step changed nothing"
    assert changed <= beta  # base, alpha and gamma are bit-identical
    assert any("lora_A" in n for n in changed) and any("lora_B" in n for n in changed)
    assert trainer.versions == {"alpha": 0, "beta": 2, "gamma": 0}
    # Untrained adapters still equal the base (lora_B = 0); the trained one does not.
    base = trainer.reference_log_probs(batch)
    assert torch.equal(trainer.old_log_probs("alpha", batch), base)
    assert not torch.allclose(trainer.old_log_probs("beta", batch), base)


def test_adapter_state_drives_the_rollout_copy(tiny_model_path: Path) -> None:
    trainer = MultiLoraTrainer(tiny_model_path, ADAPTERS, lr=1e-2)
    batch = make_batch()
    for _ in range(2):
        trainer.train_step(
            "beta", batch, torch.tensor([1.0, -1.0]), trainer.old_log_probs("beta", batch)
        )
    state = trainer.adapter_state("beta")
    assert state.version == 2 and state.config["r"] == 8
    assert all(t.device.type == "cpu" for t in state.state_dict.values())
    assert all(".beta." not in name for name in state.state_dict)  # peft's saved names
    # LoRA tensors only, the head's too; never a copy of the frozen (tied) head itself.
    assert all(".lora_" in name for name in state.state_dict)
    assert any("lm_head.lora_B" in name for name in state.state_dict)
    backend = HfBackend(tiny_model_path, chunk_tokens=4, enable_lora=True)
    backend.update_adapter(state)  # while asleep: applied on load
    backend.update_adapter(trainer.adapter_state("alpha"))
    backend.load()
    prompt = tuple(b"say b:")
    greedy = SamplingParams(temperature=0.0)
    requests = [
        GenerationRequest("beta", prompt, 6, adapter="beta", sampling=greedy),
        GenerationRequest("base", prompt, 6, adapter=None, sampling=greedy),
        GenerationRequest("alpha", prompt, 6, adapter="alpha", sampling=greedy),
    ]
    completions = {c.request_id: c for c in backend.generate(requests)}
    assert completions["beta"].weight_version == 2 and completions["alpha"].weight_version == 0
    for name, expected_fn in [
        ("beta", lambda b: trainer.old_log_probs("beta", b)),
        ("alpha", lambda b: trainer.old_log_probs("alpha", b)),
        ("base", trainer.reference_log_probs),
    ]:
        replay = build_batch([list(prompt)], [list(completions[name].token_ids)], 257)
        expected = expected_fn(replay)[0, len(prompt) :]
        assert list(completions[name].log_probs) == pytest.approx(expected.tolist(), abs=1e-4), name


def test_lora_checkpoint_and_bad_names(tiny_model_path: Path, tmp_path: Path) -> None:
    trainer = MultiLoraTrainer(tiny_model_path, ADAPTERS, lr=1e-2)
    batch = make_batch()
    trainer.train_step(
        "gamma", batch, torch.tensor([1.0, -1.0]), trainer.old_log_probs("gamma", batch)
    )
    trainer.train_step(
        "gamma", batch, torch.tensor([1.0, -1.0]), trainer.old_log_probs("gamma", batch)
    )
    trainer.save(tmp_path)
    restored = MultiLoraTrainer(tiny_model_path, ADAPTERS, lr=1e-2)
    restored.load(tmp_path)
    assert restored.versions == trainer.versions
    assert torch.equal(
        restored.old_log_probs("gamma", batch), trainer.old_log_probs("gamma", batch)
    )
    with pytest.raises(KeyError, match="unknown adapter 'delta'"):
        trainer.old_log_probs("delta", batch)
    with pytest.raises(ValueError, match="must not be part of 'lora_'"):
        MultiLoraTrainer(tiny_model_path, ["a"])
    with pytest.raises(ValueError, match="repeat"):
        MultiLoraTrainer(tiny_model_path, ["beta", "beta"])
    with pytest.raises(ValueError, match="letters, digits"):
        MultiLoraTrainer(tiny_model_path, ["has.dot"])
