"""The frozen reference model: log-probs for the KL penalty (priority-4 stage)."""

from __future__ import annotations

from pathlib import Path

import torch

from rlix.executor.ml.batch import TokenBatch
from rlix.executor.ml.logprobs import token_log_probs
from rlix.executor.ml.tiny_model import load_causal_lm


class ReferenceModel:
    """A copy of the initial policy that never trains."""

    def __init__(
        self, model_path: str | Path, device: str = "cpu", dtype: torch.dtype = torch.float32
    ) -> None:
        self.device = device
        self.model = load_causal_lm(model_path, device=device, dtype=dtype)
        self.model.requires_grad_(False)

    def log_probs(self, batch: TokenBatch) -> torch.Tensor:
        """Log-probs [B, T] of the batch under the reference (host tensor)."""
        with torch.no_grad():
            return token_log_probs(self.model, batch.to(self.device)).cpu()

    def offload(self) -> None:
        self.model.to("cpu")  # type: ignore[arg-type]  # transformers types PreTrainedModel.to through a decorator

    def onload(self) -> None:
        self.model.to(self.device)  # type: ignore[arg-type]  # transformers types PreTrainedModel.to through a decorator
