"""The RL maths of GRPO and PPO as pure torch functions on per-token tensors [B, T].

All per-token tensors are aligned with the batch's `input_ids` (see `batch`), and `mask` is the
response mask (1 on generated tokens, contiguous per row). Means over tokens are token-level:
the sum over every masked token in the batch divided by their count, so long responses weigh
more than short ones (the PPO convention; GRPO's per-sequence mean is one line away).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values` over the entries where mask is 1 (0 when the mask is empty)."""
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def grpo_advantages(
    rewards: torch.Tensor, scale_by_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """Group-normalised advantages for rewards [num_groups, group_size] (one group per prompt).

    A = (r - mean of its group) / (std of its group + eps), with the sample (unbiased) std as
    in DeepSeekMath / TRL. `scale_by_std=False` keeps only the centring (Dr. GRPO). A group of
    one sample, or one whose rewards are all equal, carries no signal and gets zeros.
    """
    if rewards.dim() != 2:
        raise ValueError(f"grpo_advantages: rewards must be [groups, samples], got {rewards.shape}")
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if not scale_by_std or rewards.shape[1] < 2:
        return centred if rewards.shape[1] >= 2 else torch.zeros_like(rewards)
    return centred / (rewards.std(dim=1, keepdim=True) + eps)


def broadcast_to_tokens(per_sequence: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Spread one value per row [B] over that row's response tokens [B, T]."""
    return per_sequence.unsqueeze(1) * mask


def rewards_on_last_token(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Put each row's sequence reward [B] on its last response token, zeros elsewhere [B, T]."""
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(mask > 0, positions, torch.full_like(positions, -1)).max(dim=1).values
    token_rewards = torch.zeros_like(mask, dtype=rewards.dtype)
    has_response = last >= 0
    rows = torch.arange(mask.shape[0], device=mask.device)[has_response]
    token_rewards[rows, last[has_response]] = rewards[has_response]
    return token_rewards


@dataclass(frozen=True)
class PolicyLoss:
    """The PPO clipped loss and what monitoring wants from it (detached floats)."""

    loss: torch.Tensor
    clip_fraction: float
    approx_kl: float


def ppo_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
) -> PolicyLoss:
    """PPO's clipped surrogate: mean over tokens of -min(ratio A, clip(ratio, 1-e, 1+e_high) A).

    `clip_eps_high` (default: `clip_eps`) allows DAPO's asymmetric clip. approx_kl is the mean
    of old - new log-prob, the usual cheap drift monitor.
    """
    high = clip_eps if clip_eps_high is None else clip_eps_high
    log_ratio = log_probs - old_log_probs
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + high) * advantages
    loss = masked_mean(-torch.minimum(unclipped, clipped), mask)
    was_clipped = (clipped < unclipped).float()
    return PolicyLoss(
        loss=loss,
        clip_fraction=float(masked_mean(was_clipped, mask).detach()),
        approx_kl=float(masked_mean(-log_ratio, mask).detach()),
    )


def gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation, vectorised; returns (advantages, returns), both [B, T].

    delta_t = r_t + gamma V_{t+1} - V_t (V past the last response token is 0) and
    A_t = sum_{s >= t} (gamma lam)^(s - t) delta_s, computed for all t at once as one matrix
    product with the [T, T] discount matrix instead of a Python loop over tokens. The mask must
    be contiguous per row (one response segment), as `build_batch` makes it.
    """
    next_values = torch.zeros_like(values)
    next_values[:, :-1] = (values * mask)[:, 1:]
    deltas = (token_rewards + gamma * next_values - values) * mask
    num_tokens = values.shape[1]
    index = torch.arange(num_tokens, device=values.device, dtype=values.dtype)
    lag = index.unsqueeze(0) - index.unsqueeze(1)  # lag[t, s] = s - t
    discount = torch.where(
        lag >= 0, torch.pow(torch.tensor(gamma * lam, dtype=values.dtype), lag.clamp(min=0)), 0.0
    )
    advantages = (deltas @ discount.T) * mask
    returns = (advantages + values) * mask
    return advantages, returns


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float | None = 0.2,
) -> torch.Tensor:
    """0.5 * mean over tokens of the squared error to the returns, PPO-clipped around old values.

    With clipping, the error is the larger of the unclipped one and the one of
    old + clip(new - old, -c, c), so one update cannot move a value estimate far.
    """
    error = (values - returns) ** 2
    if clip_range is not None:
        clipped_values = old_values + torch.clamp(values - old_values, -clip_range, clip_range)
        error = torch.maximum(error, (clipped_values - returns) ** 2)
    return 0.5 * masked_mean(error, mask)


def kl_k3(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(policy || reference): exp(d) - d - 1 with d = ref - policy.

    Unbiased for samples from the policy and never negative (Schulman's "Approximating KL").
    """
    diff = ref_log_probs - log_probs
    return torch.exp(diff) - diff - 1.0


def kl_k1(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """Per-token k1 estimator (policy - reference), the usual KL penalty folded into rewards."""
    return log_probs - ref_log_probs


def whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over the masked entries (population std), zero elsewhere.

    PPO whitens GAE advantages per batch so the step size does not depend on the reward scale.
    """
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    return (values - mean) * torch.rsqrt(variance + eps) * mask
