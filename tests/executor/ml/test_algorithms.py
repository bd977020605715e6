"""The RL maths against values computed by hand (or by a plain loop, for GAE)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from rlix.executor.ml.algorithms import (  # noqa: E402
    broadcast_to_tokens,
    gae,
    grpo_advantages,
    kl_k1,
    kl_k3,
    masked_mean,
    ppo_policy_loss,
    rewards_on_last_token,
    value_loss,
    whiten,
)


def test_masked_mean_counts_only_masked_entries() -> None:
    values = torch.tensor([[1.0, 2.0, 100.0], [3.0, 100.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert masked_mean(values, mask).item() == pytest.approx(2.0)  # (1 + 2 + 3) / 3
    assert masked_mean(values, torch.zeros_like(mask)).item() == 0.0


def test_grpo_advantages_by_hand() -> None:
    # Group [1, 0, 0, 1]: mean 0.5, sample std sqrt(4 * 0.25 / 3) = 0.57735.
    # Group [2, 4, 6, 8]: mean 5, sample std sqrt((9 + 1 + 1 + 9) / 3) = 2.58199.
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [2.0, 4.0, 6.0, 8.0]])
    advantages = grpo_advantages(rewards, eps=0.0)
    assert advantages[0].tolist() == pytest.approx(
        [0.866025, -0.866025, -0.866025, 0.866025], abs=1e-5
    )
    assert advantages[1].tolist() == pytest.approx(
        [-1.161895, -0.387298, 0.387298, 1.161895], abs=1e-5
    )
    centred = grpo_advantages(rewards, scale_by_std=False)
    assert centred[1].tolist() == pytest.approx([-3.0, -1.0, 1.0, 3.0])


def test_grpo_advantages_without_signal_are_zero() -> None:
    assert grpo_advantages(torch.tensor([[0.5, 0.5, 0.5]])).abs().max().item() == 0.0
    assert grpo_advantages(torch.tensor([[0.7], [0.1]])).abs().max().item() == 0.0
    with pytest.raises(ValueError, match="groups, samples"):
        grpo_advantages(torch.tensor([1.0, 2.0]))


def test_ppo_policy_loss_by_hand() -> None:
    # Token ratios e^0.5 = 1.6487 (A = +1, clipped to 1.2), e^-0.5 = 0.6065 (A = +1, not
    # clipped: min picks 0.6065), e^0.1 = 1.1052 (A = -2: -2.2103 vs -2.2103, inside the clip),
    # e^-0.5 (A = -1: -0.6065 vs clip 0.8 -> -0.8; min is -0.8, clipped). The fifth is masked.
    log_ratio = torch.tensor([[0.5, -0.5, 0.1, -0.5, 3.0]])
    old = torch.zeros_like(log_ratio)
    advantages = torch.tensor([[1.0, 1.0, -2.0, -1.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    result = ppo_policy_loss(log_ratio, old, advantages, mask, clip_eps=0.2)
    objective = [1.2, math.exp(-0.5), -2.0 * math.exp(0.1), -0.8]
    assert result.loss.item() == pytest.approx(-sum(objective) / 4, abs=1e-6)
    assert result.clip_fraction == pytest.approx(0.5)  # tokens 1 and 4
    assert result.approx_kl == pytest.approx(-(0.5 - 0.5 + 0.1 - 0.5) / 4)


def test_ppo_policy_loss_asymmetric_clip_and_gradient() -> None:
    log_probs = torch.tensor([[math.log(1.25)]], requires_grad=True)
    result = ppo_policy_loss(
        log_probs, torch.zeros((1, 1)), torch.ones((1, 1)), torch.ones((1, 1)), 0.2, 0.28
    )
    assert result.loss.item() == pytest.approx(-1.25)  # 1.25 < 1.28: not clipped
    result.loss.backward()
    assert log_probs.grad is not None
    assert log_probs.grad.item() == pytest.approx(-1.25)  # d(-ratio)/dlogp = -ratio


def gae_reference(
    rewards: list[float], values: list[float], gamma: float, lam: float
) -> tuple[list[float], list[float]]:
    """Textbook GAE over one response, token by token from the end."""
    advantages = [0.0] * len(rewards)
    running = 0.0
    for t in reversed(range(len(rewards))):
        next_value = values[t + 1] if t + 1 < len(rewards) else 0.0
        delta = rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * running
        advantages[t] = running
    return advantages, [a + v for a, v in zip(advantages, values, strict=True)]


def test_gae_matches_the_loop_reference() -> None:
    generator = torch.Generator().manual_seed(0)
    # Rows with different prompt lengths and response lengths, right padded.
    spans = [(2, 5), (1, 7), (4, 2), (3, 0)]
    width = 9
    rewards = torch.randn((len(spans), width), generator=generator)
    values = torch.randn((len(spans), width), generator=generator)
    mask = torch.zeros((len(spans), width))
    for row, (start, length) in enumerate(spans):
        mask[row, start : start + length] = 1.0
    for gamma, lam in [(1.0, 0.95), (0.9, 0.8), (0.99, 0.0), (1.0, 1.0)]:
        advantages, returns = gae(rewards * mask, values * mask, mask, gamma, lam)
        for row, (start, length) in enumerate(spans):
            span = slice(start, start + length)
            expected_adv, expected_ret = gae_reference(
                rewards[row, span].tolist(), values[row, span].tolist(), gamma, lam
            )
            assert advantages[row, span].tolist() == pytest.approx(expected_adv, abs=1e-5)
            assert returns[row, span].tolist() == pytest.approx(expected_ret, abs=1e-5)
        assert advantages[mask == 0].abs().max().item() == 0.0


def test_gae_by_hand() -> None:
    # Two tokens, reward 1 at the end, values [0.5, 0.25], gamma 1, lam 0.5:
    # delta_1 = 1 - 0.25 = 0.75; delta_0 = 0 + 0.25 - 0.5 = -0.25; A_0 = -0.25 + 0.5 * 0.75.
    advantages, returns = gae(
        torch.tensor([[0.0, 0.0, 1.0]]),
        torch.tensor([[0.0, 0.5, 0.25]]),
        torch.tensor([[0.0, 1.0, 1.0]]),
        gamma=1.0,
        lam=0.5,
    )
    assert advantages.tolist() == [[0.0, 0.125, 0.75]]
    assert returns.tolist() == [[0.0, 0.625, 1.0]]


def test_value_loss_by_hand() -> None:
    values = torch.tensor([[1.0, 0.0, 2.0]])
    old = torch.tensor([[0.5, 0.0, 0.0]])
    returns = torch.tensor([[0.0, 1.0, 3.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0]])
    # Unclipped squared errors: 1, 1, 1 -> 0.5 * 1.
    assert value_loss(values, old, returns, mask, clip_range=None).item() == pytest.approx(0.5)
    # Clipped values: 0.5 + 0.2 = 0.7 (err 0.49), 0 (1), 0 + 0.2 (7.84): max per token 1, 1, 7.84.
    assert value_loss(values, old, returns, mask, 0.2).item() == pytest.approx(0.5 * 9.84 / 3)


def test_kl_estimators_by_hand() -> None:
    log_probs = torch.tensor([[-1.0, -2.0]])
    ref = torch.tensor([[-1.5, -2.0]])
    k3 = kl_k3(log_probs, ref)
    assert k3.tolist()[0] == pytest.approx([math.exp(-0.5) + 0.5 - 1.0, 0.0])
    assert kl_k1(log_probs, ref).tolist() == [[0.5, 0.0]]
    # k3 is never negative, whichever way the policies differ.
    assert kl_k3(ref, log_probs).min().item() >= 0.0


def test_rewards_on_last_token_and_broadcast() -> None:
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    rewards = torch.tensor([2.0, 3.0, 4.0])
    assert rewards_on_last_token(rewards, mask).tolist() == [
        [0.0, 0.0, 2.0, 0.0],
        [0.0, 0.0, 0.0, 3.0],
        [0.0, 0.0, 0.0, 0.0],
    ]
    assert broadcast_to_tokens(rewards, mask)[0].tolist() == [0.0, 2.0, 2.0, 0.0]


def test_whiten_by_hand() -> None:
    values = torch.tensor([[1.0, 3.0, 99.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    assert whiten(values, mask, eps=0.0).tolist() == [[-1.0, 1.0, 0.0]]
