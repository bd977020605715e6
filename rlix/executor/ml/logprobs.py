"""Token log-probabilities of a batch under a causal LM (any module returning `.logits`)."""

from __future__ import annotations

import torch
from torch import nn

from rlix.executor.ml.batch import TokenBatch


def gather_token_log_probs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Log-prob of each token given the ones before it, aligned with `input_ids` [B, T].

    logits[:, t] predicts token t + 1, so entry t is log softmax(logits[:, t - 1])[token t];
    entry 0 has no predecessor and is 0. Computed as logit - logsumexp so no second
    [B, T, vocab] tensor is materialised (large vocabularies make that the memory peak).
    """
    shifted = logits[:, :-1].float()
    targets = input_ids[:, 1:].unsqueeze(-1)
    picked = shifted.gather(-1, targets).squeeze(-1) - torch.logsumexp(shifted, dim=-1)
    return torch.cat([torch.zeros_like(picked[:, :1]), picked], dim=1)


def token_log_probs(model: nn.Module, batch: TokenBatch) -> torch.Tensor:
    """Per-token log-probs [B, T] of `batch` under `model`; zero outside the response mask.

    Gradients flow when called with grad enabled (training); wrap in torch.no_grad() for
    old/reference log-probs.
    """
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    return gather_token_log_probs(logits, batch.input_ids) * batch.response_mask
