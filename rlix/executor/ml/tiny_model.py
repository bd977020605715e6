"""The tiny Qwen2-style model for CPU runs, and `prepare_model`, which validates a model spec.

"tiny" is built from a `Qwen2Config` with a fixed seed and saved with `save_pretrained` next to
the byte tokenizer; everything downstream loads it with `AutoModelForCausalLM.from_pretrained`,
so a real model folder goes through exactly the same code. The head size is 32 (not 16) because
vLLM's attention kernels accept 32 and up; the tiny model can then also be served by vLLM.

The model classes are imported where a model is built or loaded: `prepare_model`, which every
run calls before Ray starts, needs only the config and the tokenizer, and transformers'
modeling code costs seconds of CPU to import.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import AutoConfig, AutoTokenizer, Qwen2Config

from rlix.executor.ml.tokenizer import EOS_TOKEN_ID, PAD_TOKEN_ID, save_byte_tokenizer

if TYPE_CHECKING:
    from transformers import PreTrainedModel

TINY_SPEC = "tiny"
TINY_FOLDER_NAME = "tiny-qwen2"
TINY_SEED = 1234
WEIGHT_FILE_PATTERNS = ("*.safetensors", "pytorch_model*.bin")


class ModelSpecError(ValueError):
    """A model spec that is neither "tiny" nor a loadable local model folder."""


def tiny_config() -> Qwen2Config:
    """2 layers, hidden 128, 4 query heads and 2 KV heads of size 32, byte vocabulary (+pad)."""
    return Qwen2Config(
        vocab_size=260,  # 258 tokens, rounded up to an even size
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=EOS_TOKEN_ID,
        pad_token_id=PAD_TOKEN_ID,
        bos_token_id=None,
    )


def build_tiny_model(folder: str | Path, seed: int = TINY_SEED) -> Path:
    """Build the tiny model and tokenizer deterministically and save both into `folder`."""
    from transformers import Qwen2ForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # fork_rng: building must not disturb the caller's random stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(tiny_config())
    model.generation_config.pad_token_id = PAD_TOKEN_ID
    model.generation_config.eos_token_id = EOS_TOKEN_ID
    model.save_pretrained(str(folder))
    save_byte_tokenizer(folder)
    return folder


def prepare_model(spec: str, workdir: str | Path) -> Path:
    """Resolve a model spec to a validated local folder, building "tiny" when asked.

    Any other spec is a local folder that must hold a config, a tokenizer and weight files;
    the checks are cheap (no weights are read) so the executor can run them before it starts
    actors. Raises ModelSpecError with a one-line message otherwise.
    """
    if spec == TINY_SPEC:
        folder = Path(workdir) / TINY_FOLDER_NAME
        if not (folder / "config.json").exists():
            build_tiny_model(folder)
        return folder
    folder = Path(spec)
    if not folder.is_dir():
        raise ModelSpecError(
            f"model {spec!r}: not {TINY_SPEC!r} and not an existing local folder "
            "(model hubs are not used; give a downloaded model folder)"
        )
    try:
        AutoConfig.from_pretrained(str(folder))
    except (OSError, ValueError, json.JSONDecodeError) as exc:
        raise ModelSpecError(f"model {spec!r}: config does not load: {_one_line(exc)}") from exc
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    except (OSError, ValueError, TypeError, json.JSONDecodeError) as exc:
        raise ModelSpecError(f"model {spec!r}: tokenizer does not load: {_one_line(exc)}") from exc
    # Recent transformers build an empty tokenizer from the config alone instead of failing.
    if not tokenizer.encode("a", add_special_tokens=False):
        raise ModelSpecError(f"model {spec!r}: tokenizer does not load: no tokenizer files")
    if not any(any(folder.glob(pattern)) for pattern in WEIGHT_FILE_PATTERNS):
        raise ModelSpecError(f"model {spec!r}: no weight files (*.safetensors, pytorch_model*.bin)")
    return folder


def load_causal_lm(
    folder: str | Path, device: str = "cpu", dtype: torch.dtype = torch.float32
) -> PreTrainedModel:
    """Load a causal LM through the normal `from_pretrained` path, on `device`, in eval mode."""
    from transformers import AutoModelForCausalLM

    # dtype is applied after loading: the keyword changed name across transformers versions.
    model = AutoModelForCausalLM.from_pretrained(str(folder))
    loaded: PreTrainedModel = model.to(device=device, dtype=dtype).eval()  # type: ignore[call-arg]  # transformers types PreTrainedModel.to through a decorator
    return loaded


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]
