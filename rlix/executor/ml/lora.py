"""The multi-LoRA trainer: one frozen base shared by several peft LoRA adapters.

Each adapter has its own optimizer, holding only that adapter's tensors, and its own version
(steps taken). `train_step(adapter, ...)` activates the adapter and steps its optimizer, so the
base and every other adapter stay bit-identical. The base with adapters disabled is the initial
policy of every adapter, so it doubles as the reference model (`reference_log_probs`).
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from peft import (
    LoraConfig,
    PeftModel,
    get_peft_model,
    get_peft_model_state_dict,
    set_peft_model_state_dict,
)
from safetensors.torch import load_file

from rlix.executor.ml.batch import TokenBatch
from rlix.executor.ml.device import host_copy, move_trainer
from rlix.executor.ml.logprobs import token_log_probs
from rlix.executor.ml.policy_update import PolicyLossSettings, policy_gradient_step
from rlix.executor.ml.rollout.base import AdapterWeights
from rlix.executor.ml.tiny_model import load_causal_lm

# Adapter names become parts of parameter names (`...lora_A.<name>.weight`): keep them plain.
ADAPTER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
LORA_PREFIX = "lora_"
ADAPTER_STATE_FILE = "adapter_trainer_state.json"
OPTIMIZER_FILE = "optimizer.pt"


ATTENTION_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
# lm_head is in the default targets: the blocks' outputs pass the final RMSNorm, so changing them
# moves the normed hidden state on a fixed-radius sphere, and the logits it reaches are bounded
# by the frozen head's row norms. On a randomly initialised model (the tiny one: rows ~0.22,
# logits within about +-2.6 over 260 tokens) that bound keeps the policy near uniform: the best
# reachable expected `letter_closeness` per token (measured at width 32) is ~0.17 against 0.12 at
# the start, so LoRA on attention (or MLP) alone cannot learn the toy task at any lr. A LoRA delta on the head is not
# bounded that way. With tied embeddings it changes only the head's output, not the input
# embeddings. vLLM does not serve LoRA on lm_head: use ATTENTION_MODULES there.
DEFAULT_TARGET_MODULES = (*ATTENTION_MODULES, "lm_head")
# peft warns when a LoRA target is tied to the embeddings, for merging; adapters here never merge.
TIED_TARGET_WARNING = ".*tie_word_embeddings=True.*"


@dataclass(frozen=True)
class LoraSettings:
    """peft LoRA hyper-parameters shared by every adapter (no dropout: exact old log-probs)."""

    rank: int = 8
    alpha: int = 16
    target_modules: tuple[str, ...] = DEFAULT_TARGET_MODULES

    def peft_config(self) -> LoraConfig:
        return LoraConfig(
            r=self.rank,
            lora_alpha=self.alpha,
            lora_dropout=0.0,
            target_modules=list(self.target_modules),
            task_type="CAUSAL_LM",
        )


class MultiLoraTrainer:
    """Several adapters on one base; each trained, versioned and exported on its own."""

    def __init__(
        self,
        model_path: str | Path,
        adapters: Sequence[str],
        lr: float = 1e-4,
        weight_decay: float = 0.0,
        lora: LoraSettings | None = None,
        loss: PolicyLossSettings | None = None,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        micro_batch_size: int | None = None,
    ) -> None:
        if not adapters:
            raise ValueError("multi-LoRA trainer: no adapters")
        for name in adapters:
            if not ADAPTER_NAME.match(name):
                raise ValueError(f"adapter name {name!r}: use letters, digits, '_' or '-'")
            if name in LORA_PREFIX:
                # peft finds adapter tensors by substring; such a name would match every one.
                raise ValueError(f"adapter name {name!r}: must not be part of {LORA_PREFIX!r}")
        if len(set(adapters)) != len(adapters):
            raise ValueError(f"adapter names repeat: {list(adapters)}")
        self.device = device
        self.loss_settings = loss or PolicyLossSettings()
        self.micro_batch_size = micro_batch_size
        self.lora = lora or LoraSettings()
        base = load_causal_lm(model_path, device=device, dtype=dtype)
        config = self.lora.peft_config()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=TIED_TARGET_WARNING)
            self.model: PeftModel = get_peft_model(base, config, adapter_name=adapters[0])
            for name in adapters[1:]:
                self.model.add_adapter(name, self.lora.peft_config())
        self.model.eval()
        self.adapters = list(adapters)
        self.versions = dict.fromkeys(adapters, 0)
        self.optimizers = {
            name: torch.optim.AdamW(self._adapter_params(name), lr=lr, weight_decay=weight_decay)
            for name in adapters
        }

    def _adapter_params(self, adapter: str) -> list[torch.nn.Parameter]:
        marker = f".{adapter}."
        params = [p for n, p in self.model.named_parameters() if marker in n and "lora_" in n]
        if not params:
            raise ValueError(f"adapter {adapter!r}: no LoRA parameters found")
        return params

    def _check(self, adapter: str) -> None:
        if adapter not in self.versions:
            raise KeyError(f"unknown adapter {adapter!r}; adapters: {', '.join(self.adapters)}")

    def old_log_probs(self, adapter: str, batch: TokenBatch) -> torch.Tensor:
        """Log-probs [B, T] under base + `adapter` (host tensor)."""
        self._check(adapter)
        self.model.set_adapter(adapter)
        with torch.no_grad():
            return token_log_probs(self.model, batch.to(self.device)).cpu()

    def reference_log_probs(self, batch: TokenBatch) -> torch.Tensor:
        """Log-probs [B, T] under the frozen base alone."""
        with torch.no_grad(), self.model.disable_adapter():
            return token_log_probs(self.model, batch.to(self.device)).cpu()

    def train_step(
        self,
        adapter: str,
        batch: TokenBatch,
        advantages: torch.Tensor,
        old_log_probs: torch.Tensor,
        ref_log_probs: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """One optimizer step of `adapter` only; bumps that adapter's version."""
        self._check(adapter)
        # set_adapter also marks only this adapter trainable, so no gradient reaches the others.
        self.model.set_adapter(adapter)
        metrics = policy_gradient_step(
            self.model,
            self.optimizers[adapter],
            self._adapter_params(adapter),
            batch.to(self.device),
            advantages,
            old_log_probs,
            ref_log_probs,
            self.loss_settings,
            self.micro_batch_size,
        )
        self.versions[adapter] += 1
        return {**metrics, "version": float(self.versions[adapter])}

    def adapter_state(self, adapter: str) -> AdapterWeights:
        """Host copy of one adapter's tensors (peft's saved names) with its config and version."""
        self._check(adapter)
        # Only LoRA tensors: with lm_head targeted peft would add the full (frozen) head.
        state = get_peft_model_state_dict(
            self.model, adapter_name=adapter, save_embedding_layers=False
        )
        config = self.model.peft_config[adapter].to_dict()
        config["target_modules"] = sorted(config["target_modules"])
        # JSON-safe (enums become their values) so it can be written as adapter_config.json.
        config = json.loads(json.dumps(config, default=str))
        return AdapterWeights(adapter, self.versions[adapter], config, host_copy(state))

    def offload(self) -> None:
        move_trainer(self.model, list(self.optimizers.values()), "cpu")

    def onload(self) -> None:
        move_trainer(self.model, list(self.optimizers.values()), self.device)

    def save(self, folder: str | Path) -> None:
        """Each adapter in peft's folder layout (folder/<adapter>/), optimizers, versions."""
        folder = Path(folder)
        self.model.save_pretrained(
            str(folder), selected_adapters=self.adapters, save_embedding_layers=False
        )
        for name, optimizer in self.optimizers.items():
            torch.save(
                optimizer.state_dict(), _adapter_dir(folder, name, self.adapters) / OPTIMIZER_FILE
            )
        (folder / ADAPTER_STATE_FILE).write_text(json.dumps({"versions": self.versions}))

    def load(self, folder: str | Path) -> None:
        """Restore every adapter's tensors, optimizer state and version saved by `save`."""
        folder = Path(folder)
        state_file = folder / ADAPTER_STATE_FILE
        if not state_file.exists():
            raise FileNotFoundError(f"multi-LoRA checkpoint {folder}: no {ADAPTER_STATE_FILE}")
        versions = json.loads(state_file.read_text())["versions"]
        for name in self.adapters:
            if name not in versions:
                raise KeyError(f"multi-LoRA checkpoint {folder}: adapter {name!r} missing")
            adapter_dir = _adapter_dir(folder, name, self.adapters)
            tensors = load_file(str(adapter_dir / "adapter_model.safetensors"))
            set_peft_model_state_dict(self.model, tensors, adapter_name=name)
            optimizer_state = torch.load(adapter_dir / OPTIMIZER_FILE, map_location=self.device)
            self.optimizers[name].load_state_dict(optimizer_state)
            self.versions[name] = int(versions[name])


def _adapter_dir(folder: Path, adapter: str, adapters: list[str]) -> Path:
    """peft saves the adapter named 'default' at the top and the others in sub-folders."""
    return folder if adapter == "default" else folder / adapter
