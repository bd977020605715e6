"""Batch layout, and token log-probs against a model whose logits are known."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from rlix.executor.ml.batch import build_batch  # noqa: E402
from rlix.executor.ml.logprobs import gather_token_log_probs, token_log_probs  # noqa: E402


def test_build_batch_layout() -> None:
    batch = build_batch([[1, 2], [3]], [[4, 5, 6], [7]], pad_token_id=9)
    assert batch.input_ids.tolist() == [[1, 2, 4, 5, 6], [3, 7, 9, 9, 9]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    assert batch.response_mask.tolist() == [[0, 0, 1, 1, 1], [0, 1, 0, 0, 0]]
    assert batch.select(slice(1, 2)).input_ids.tolist() == [[3, 7, 9, 9, 9]]


def test_build_batch_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="2 prompts but 1 responses"):
        build_batch([[1], [2]], [[3]], 0)
    with pytest.raises(ValueError, match="prompt of row 0 is empty"):
        build_batch([[]], [[3]], 0)


class BigramModel(nn.Module):
    """Logits at position t depend only on token t: a table we can read log-probs from."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = table

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> object:
        return type("Output", (), {"logits": self.table[input_ids]})()


def test_token_log_probs_against_a_known_table() -> None:
    # Vocab 3; after token 0 the next-token probabilities are softmax([0, ln 2, ln 3]) = [1,2,3]/6.
    table = torch.log(torch.tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 2.0], [4.0, 1.0, 1.0]]))
    batch = build_batch([[0]], [[2, 1, 0]], pad_token_id=0)
    log_probs = token_log_probs(BigramModel(table), batch)
    expected = [0.0, math.log(3 / 6), math.log(1 / 6), math.log(1 / 4)]
    assert log_probs.tolist()[0] == pytest.approx(expected)
    # Padding and prompt positions are zero.
    padded = build_batch([[0, 1]], [[2]], pad_token_id=0)
    assert token_log_probs(BigramModel(table), padded).tolist()[0] == pytest.approx(
        [0.0, 0.0, math.log(2 / 4)]
    )


def test_gather_matches_log_softmax() -> None:
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn((2, 5, 7), generator=generator)
    ids = torch.randint(0, 7, (2, 5), generator=generator)
    expected = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    assert torch.allclose(gather_token_log_probs(logits, ids)[:, 1:], expected, atol=1e-6)
