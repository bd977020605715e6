"""The PPO critic: a scalar value head on the model's transformer backbone.

The backbone is loaded with `AutoModel.from_pretrained` from the same folder as the actor (the
causal LM's body, without its LM head). values[:, t] estimates the return from the state just
before token t is generated, i.e. the head applied to the hidden state at position t - 1, so
values line up with log-probs and advantages (see `batch`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModel

from rlix.executor.ml.algorithms import value_loss
from rlix.executor.ml.batch import TokenBatch
from rlix.executor.ml.device import move_trainer

VALUE_HEAD_FILE = "value_head.pt"
CRITIC_STATE_FILE = "critic_state.json"
OPTIMIZER_FILE = "critic_optimizer.pt"


class ValueModel(nn.Module):
    """Backbone + Linear(hidden, 1); the head starts at zero so first values are exactly 0."""

    def __init__(self, model_path: str | Path) -> None:
        super().__init__()
        self.backbone = AutoModel.from_pretrained(str(model_path))
        self.head = nn.Linear(self.backbone.config.hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, batch: TokenBatch) -> torch.Tensor:
        hidden = self.backbone(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask
        ).last_hidden_state
        state_values = self.head(hidden.float()).squeeze(-1)  # value after reading token t
        values = torch.cat([torch.zeros_like(state_values[:, :1]), state_values[:, :-1]], dim=1)
        return values * batch.response_mask


class CriticTrainer:
    """values (priority-5 stage) and value-loss training (priority-2 stage)."""

    def __init__(
        self,
        model_path: str | Path,
        lr: float = 1e-5,
        weight_decay: float = 0.0,
        clip_range: float | None = 0.2,
        max_grad_norm: float | None = 1.0,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.device = device
        self.clip_range = clip_range
        self.max_grad_norm = max_grad_norm
        self.model = ValueModel(model_path).to(device=device, dtype=dtype).eval()
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=lr, weight_decay=weight_decay
        )
        self.num_steps = 0

    def values(self, batch: TokenBatch) -> torch.Tensor:
        """Values [B, T] on response tokens (host tensor)."""
        with torch.no_grad():
            values: torch.Tensor = self.model(batch.to(self.device)).cpu()
        return values

    def train_step(
        self, batch: TokenBatch, returns: torch.Tensor, old_values: torch.Tensor
    ) -> dict[str, float]:
        """One optimizer step on the (clipped) value loss against GAE returns."""
        batch = batch.to(self.device)
        values = self.model(batch)
        loss = value_loss(
            values,
            old_values.to(self.device),
            returns.to(self.device),
            batch.response_mask,
            self.clip_range,
        )
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]  # torch's backward is untyped
        grad_norm = float("nan")
        if self.max_grad_norm is not None:
            grad_norm = float(
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
            )
        self.optimizer.step()
        self.num_steps += 1
        return {"value_loss": float(loss.detach()), "grad_norm": grad_norm}

    def offload(self) -> None:
        move_trainer(self.model, [self.optimizer], "cpu")

    def onload(self) -> None:
        move_trainer(self.model, [self.optimizer], self.device)

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        self.model.backbone.save_pretrained(str(folder))
        torch.save(self.model.head.state_dict(), folder / VALUE_HEAD_FILE)
        torch.save(self.optimizer.state_dict(), folder / OPTIMIZER_FILE)
        (folder / CRITIC_STATE_FILE).write_text(json.dumps({"num_steps": self.num_steps}))

    def load(self, folder: str | Path) -> None:
        folder = Path(folder)
        if not (folder / VALUE_HEAD_FILE).exists():
            raise FileNotFoundError(f"critic checkpoint {folder}: no {VALUE_HEAD_FILE}")
        saved = AutoModel.from_pretrained(str(folder))
        self.model.backbone.load_state_dict(saved.state_dict())
        self.model.head.load_state_dict(torch.load(folder / VALUE_HEAD_FILE))
        self.optimizer.load_state_dict(
            torch.load(folder / OPTIMIZER_FILE, map_location=self.device)
        )
        self.num_steps = int(json.loads((folder / CRITIC_STATE_FILE).read_text())["num_steps"])
