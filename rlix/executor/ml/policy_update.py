"""One policy-gradient optimizer step (PPO clipped loss + optional k3 KL), shared by trainers.

The full-finetune actor and each LoRA adapter train with the same update; only which
parameters the optimizer holds differs. Micro-batches accumulate gradients into one optimizer
step, each weighted by its share of the batch's response tokens, so the loss is the same
token-level mean however the batch is split.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from rlix.executor.ml.algorithms import kl_k3, masked_mean, ppo_policy_loss
from rlix.executor.ml.batch import TokenBatch
from rlix.executor.ml.logprobs import token_log_probs


@dataclass(frozen=True)
class PolicyLossSettings:
    """clip_eps (and DAPO's clip_eps_high), the k3 KL-to-reference weight, grad-norm clip."""

    clip_eps: float = 0.2
    clip_eps_high: float | None = None
    kl_coef: float = 0.0
    max_grad_norm: float | None = 1.0


def as_token_advantages(advantages: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
    """Accept one advantage per sequence [B] (GRPO) or per token [B, T] (GAE)."""
    if advantages.dim() == 1:
        return advantages.unsqueeze(1) * batch.response_mask
    if advantages.shape != batch.input_ids.shape:
        raise ValueError(
            f"advantages {tuple(advantages.shape)} != batch {tuple(batch.input_ids.shape)}"
        )
    return advantages


def policy_gradient_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    params: Iterable[nn.Parameter],
    batch: TokenBatch,
    advantages: torch.Tensor,
    old_log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor | None,
    settings: PolicyLossSettings,
    micro_batch_size: int | None = None,
) -> dict[str, float]:
    """Run forward/backward over micro-batches and one optimizer step; return metrics."""
    if settings.kl_coef > 0 and ref_log_probs is None:
        raise ValueError("policy update: kl_coef > 0 needs ref_log_probs")
    device = batch.input_ids.device
    token_advantages = as_token_advantages(advantages.to(device), batch)
    old_log_probs = old_log_probs.to(device)
    total_tokens = float(batch.response_mask.sum().clamp(min=1.0))
    step = micro_batch_size or batch.num_sequences
    totals = {"loss": 0.0, "policy_loss": 0.0, "kl": 0.0, "clip_fraction": 0.0, "approx_kl": 0.0}
    optimizer.zero_grad(set_to_none=True)
    for start in range(0, batch.num_sequences, step):
        rows = slice(start, start + step)
        micro = batch.select(rows)
        share = float(micro.response_mask.sum()) / total_tokens
        log_probs = token_log_probs(model, micro)
        policy = ppo_policy_loss(
            log_probs,
            old_log_probs[rows],
            token_advantages[rows],
            micro.response_mask,
            settings.clip_eps,
            settings.clip_eps_high,
        )
        loss = policy.loss
        kl = torch.zeros(())
        if ref_log_probs is not None:
            kl = masked_mean(kl_k3(log_probs, ref_log_probs[rows].to(device)), micro.response_mask)
            if settings.kl_coef > 0:
                loss = loss + settings.kl_coef * kl
        (loss * share).backward()  # type: ignore[no-untyped-call]  # torch's backward is untyped
        totals["loss"] += float(loss.detach()) * share
        totals["policy_loss"] += float(policy.loss.detach()) * share
        totals["kl"] += float(kl.detach()) * share
        totals["clip_fraction"] += policy.clip_fraction * share
        totals["approx_kl"] += policy.approx_kl * share
    params = list(params)
    if settings.max_grad_norm is not None:
        grad_norm = torch.nn.utils.clip_grad_norm_(params, settings.max_grad_norm)
    else:
        grad_norm = torch.linalg.vector_norm(
            torch.stack([p.grad.norm() for p in params if p.grad is not None])
        )
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {**totals, "grad_norm": float(grad_norm), "num_tokens": total_tokens}
