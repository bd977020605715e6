"""What a live run keeps: the trained models, saved from the trainers' host copies, load as they
are with transformers / peft `from_pretrained` and give the log-probs the trainer had."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from peft import PeftModel  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from rlix.executor.ml.batch import TokenBatch, build_batch  # noqa: E402
from rlix.executor.ml.logprobs import token_log_probs  # noqa: E402
from rlix.executor.ml_workload import DEFAULTS, MlTrainer, MlWorkload  # noqa: E402


def _batch() -> TokenBatch:
    return build_batch([list(b"say a:"), list(b"say b:")], [list(b"aaaa"), list(b"xyz")], pad_token_id=257)


def _params(model: Path) -> dict[str, Any]:
    return {**DEFAULTS, "model_path": str(model), "actor_lr": 1e-2, "lora_lr": 5e-2, "device": "cpu"}


def _trained(model: Path, adapters: list[str] | None) -> MlTrainer:
    trainer = MlTrainer(_params(model), "actor_train", adapters)
    batch = _batch()
    for name in adapters or [None]:
        head = (name,) if name else ()
        old = trainer.run("old_log_probs", *head, batch)
        trainer.run("train_step", *head, batch, torch.tensor([1.0, -1.0]), old, None)
    return trainer


class _Handle:
    """Stands in for a trainer actor's handle: `call.remote` runs the method here."""

    def __init__(self, trainer: MlTrainer) -> None:
        self.trainer = trainer
        self.call = self

    async def remote(self, method: str, *args: Any) -> Any:
        return getattr(self.trainer, method)(*args)


def _save(trainer: MlTrainer, folder: Path) -> None:
    workload = MlWorkload.__new__(MlWorkload)  # save_models needs no state of the workload
    asyncio.run(workload.save_models({"actor_train": _Handle(trainer)}, str(folder)))


def test_a_full_finetune_model_loads_with_transformers(tiny_model_path: Path, tmp_path: Path) -> None:
    trainer = _trained(tiny_model_path, None)
    _save(trainer, tmp_path / "ft")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "ft").eval()
    batch = _batch()
    with torch.no_grad():
        mine = token_log_probs(loaded, batch)
    assert torch.allclose(mine, trainer.run("old_log_probs", batch), atol=1e-6)
    untrained = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    with torch.no_grad():
        assert not torch.allclose(token_log_probs(untrained, batch), mine, atol=1e-4)  # it trained


def test_each_adapter_loads_with_peft(tiny_model_path: Path, tmp_path: Path) -> None:
    adapters = ["a0", "a1"]
    trainer = _trained(tiny_model_path, adapters)
    _save(trainer, tmp_path / "lora")
    batch = _batch()
    for adapter in adapters:
        assert (tmp_path / "lora" / adapter / "adapter_config.json").exists()
        base = AutoModelForCausalLM.from_pretrained(tiny_model_path)
        loaded = PeftModel.from_pretrained(base, tmp_path / "lora" / adapter).eval()
        with torch.no_grad():
            mine = token_log_probs(loaded, batch)
        assert torch.allclose(mine, trainer.run("old_log_probs", adapter, batch), atol=1e-6), adapter


@pytest.mark.parametrize("adapters", [None, ["a0", "a1"]], ids=["full-finetune", "multi-lora"])
def test_the_models_of_a_last_steps_checkpoint_are_what_the_trainers_would_save(
        tiny_model_path: Path, tmp_path: Path, adapters: list[str] | None) -> None:
    """A pipeline resumed past its last step starts no trainer: its models come from the
    checkpoint, file for file what `save_models` writes, without the checkpoint's own files."""
    trainer = _trained(tiny_model_path, adapters)
    workload = MlWorkload.__new__(MlWorkload)
    handles = {"actor_train": _Handle(trainer)}
    asyncio.run(workload.save_models(handles, str(tmp_path / "saved")))
    asyncio.run(workload.save_checkpoint(handles, str(tmp_path / "ckpt")))
    (tmp_path / "ckpt" / "checkpoint.json").write_text("{}")
    asyncio.run(workload.models_from_checkpoint(str(tmp_path / "ckpt"), str(tmp_path / "kept")))

    def files(folder: Path) -> dict[str, bytes]:
        return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}

    saved, kept = files(tmp_path / "saved"), files(tmp_path / "kept")
    assert sorted(kept) == sorted(saved) and kept == saved
    assert len(files(tmp_path / "ckpt")) == len(saved) + 2  # the RNG states and checkpoint.json stay out
