"""Padded token batches: prompt + response per row, with the masks the RL losses need.

Rows are right-padded (prompt, then response, then padding), so position ids follow from the
attention mask's prefix and causal attention never sees padding before a real token. Every
per-token tensor in this package (log-probs, values, advantages) is aligned with `input_ids`:
entry t belongs to token t, and `response_mask` selects the generated tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TokenBatch:
    """input_ids and attention_mask [B, T] (long), response_mask [B, T] (float, 1 = generated)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor

    @property
    def num_sequences(self) -> int:
        return int(self.input_ids.shape[0])

    def to(self, device: str | torch.device) -> TokenBatch:
        return TokenBatch(
            self.input_ids.to(device), self.attention_mask.to(device), self.response_mask.to(device)
        )

    def select(self, rows: slice) -> TokenBatch:
        """A sub-batch of rows (for micro-batching); padding columns are kept."""
        return TokenBatch(self.input_ids[rows], self.attention_mask[rows], self.response_mask[rows])


def build_batch(
    prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_token_id: int
) -> TokenBatch:
    """Concatenate each prompt with its response and right-pad to the longest row."""
    if len(prompts) != len(responses):
        raise ValueError(f"build_batch: {len(prompts)} prompts but {len(responses)} responses")
    if not prompts:
        raise ValueError("build_batch: empty batch")
    for row, prompt in enumerate(prompts):
        if not prompt:
            # Token 0 has no log-prob (nothing precedes it), so a response needs a prompt.
            raise ValueError(f"build_batch: prompt of row {row} is empty")
    width = max(len(p) + len(r) for p, r in zip(prompts, responses, strict=True))
    num_rows = len(prompts)
    input_ids = torch.full((num_rows, width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((num_rows, width), dtype=torch.long)
    response_mask = torch.zeros((num_rows, width), dtype=torch.float32)
    for row, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        length = len(prompt) + len(response)
        input_ids[row, :length] = torch.tensor(list(prompt) + list(response), dtype=torch.long)
        attention_mask[row, :length] = 1
        response_mask[row, len(prompt) : length] = 1.0
    return TokenBatch(input_ids, attention_mask, response_mask)
