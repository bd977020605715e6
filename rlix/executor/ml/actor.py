"""The full-finetune actor trainer: old log-probs, PPO/GRPO steps, versioned weight snapshots.

Plain Python holding torch state; the executor's actor_train actor wraps one. The weight
version counts optimizer steps from the loaded checkpoint (version 0 = the model folder), and
`state_dict_for_inference` returns a host copy tagged with it: what the pipeline promotes to
the host-memory cache and rollout ranks load.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlix.executor.ml.batch import TokenBatch
from rlix.executor.ml.device import host_copy, move_trainer
from rlix.executor.ml.logprobs import token_log_probs
from rlix.executor.ml.policy_update import PolicyLossSettings, policy_gradient_step
from rlix.executor.ml.rollout.base import FullWeights
from rlix.executor.ml.tiny_model import load_causal_lm

TRAINER_STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.pt"


class ActorTrainer:
    """AdamW on every parameter of a causal LM. Kept in eval mode: no dropout, so the ratio of
    new to old log-probs is exactly 1 before the first update (gradients flow regardless)."""

    def __init__(
        self,
        model_path: str | Path,
        lr: float = 1e-5,
        weight_decay: float = 0.0,
        loss: PolicyLossSettings | None = None,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        micro_batch_size: int | None = None,
    ) -> None:
        self.model_path = Path(model_path)
        self.device = device
        self.loss_settings = loss or PolicyLossSettings()
        self.micro_batch_size = micro_batch_size
        self.model = load_causal_lm(model_path, device=device, dtype=dtype)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=lr, weight_decay=weight_decay
        )
        self.version = 0

    def old_log_probs(self, batch: TokenBatch) -> torch.Tensor:
        """Log-probs [B, T] of the batch under the current weights (host tensor)."""
        with torch.no_grad():
            return token_log_probs(self.model, batch.to(self.device)).cpu()

    def train_step(
        self,
        batch: TokenBatch,
        advantages: torch.Tensor,
        old_log_probs: torch.Tensor,
        ref_log_probs: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """One optimizer step; advantages per sequence [B] or per token [B, T]. Bumps version."""
        metrics = policy_gradient_step(
            self.model,
            self.optimizer,
            self.model.parameters(),
            batch.to(self.device),
            advantages,
            old_log_probs,
            ref_log_probs,
            self.loss_settings,
            self.micro_batch_size,
        )
        self.version += 1
        return {**metrics, "version": float(self.version)}

    def state_dict_for_inference(self) -> FullWeights:
        """A host (CPU) copy of the weights, tagged with the current version."""
        return FullWeights(self.version, host_copy(self.model.state_dict()))

    def offload(self) -> None:
        move_trainer(self.model, [self.optimizer], "cpu")

    def onload(self) -> None:
        move_trainer(self.model, [self.optimizer], self.device)

    def save(self, folder: str | Path) -> None:
        """A checkpoint that is also a loadable model folder (weights, config, tokenizer)."""
        folder = Path(folder)
        self.model.save_pretrained(str(folder))
        AutoTokenizer.from_pretrained(str(self.model_path)).save_pretrained(str(folder))
        torch.save(self.optimizer.state_dict(), folder / OPTIMIZER_FILE)
        (folder / TRAINER_STATE_FILE).write_text(json.dumps({"version": self.version}))

    def load(self, folder: str | Path) -> None:
        """Restore weights, optimizer state and version saved by `save`."""
        folder = Path(folder)
        state_file = folder / TRAINER_STATE_FILE
        if not state_file.exists():
            raise FileNotFoundError(f"actor checkpoint {folder}: no {TRAINER_STATE_FILE}")
        saved = AutoModelForCausalLM.from_pretrained(str(folder))
        # Copy into the existing parameters: the optimizer keeps referring to them.
        self.model.load_state_dict(saved.state_dict())
        optimizer_state = torch.load(folder / OPTIMIZER_FILE, map_location=self.device)
        self.optimizer.load_state_dict(optimizer_state)
        self.version = int(json.loads(state_file.read_text())["version"])
