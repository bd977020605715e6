"""Rollout batches for the simulator: trajectory lengths sampled from a trace, per step, seeded.

A step of a pipeline generates prompts x samples trajectories. Their lengths come straight from
the replayed trace: when the trace has prompt groups (`step`, `group` columns, as the bundled
generators and verl-style logs have), a step draws whole prompt groups and samples within each,
so the spread between the samples of one prompt is the trace's own; otherwise samples are drawn
row by row. Each (pipeline, adapter, step) has its own random stream derived from the scenario
seed, so a run is reproducible and adding a pipeline does not change another's batches.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

#: Prompt length when the trace has none (an assumption: agentic and math prompts of a few
#: hundred tokens; prefill is a small part of a step either way).
DEFAULT_PROMPT_TOKENS = 512


@dataclass(frozen=True)
class Batch:
    prompt_tokens: np.ndarray
    response_tokens: np.ndarray

    @property
    def num_tokens(self) -> int:
        return int(self.prompt_tokens.sum() + self.response_tokens.sum())


class BatchSampler:
    """Samples the batches of one trace."""

    def __init__(
        self, trace: pd.DataFrame, seed: int, max_response_tokens: int | None = None
    ) -> None:
        response = trace["response_tokens"].to_numpy(dtype=np.int64)
        if max_response_tokens is not None:
            response = np.minimum(response, max_response_tokens)
        if "prompt_tokens" in trace:
            prompt = trace["prompt_tokens"].fillna(DEFAULT_PROMPT_TOKENS).to_numpy(dtype=np.int64)
        else:
            prompt = np.full(len(response), DEFAULT_PROMPT_TOKENS, dtype=np.int64)
        self.response = response
        self.prompt = prompt
        self.seed = seed
        if "group" in trace:
            keys = trace[["step", "group"]] if "step" in trace else trace[["group"]]
            codes = keys.groupby(list(keys.columns), sort=True).ngroup().to_numpy()
            # Groups as one array of row numbers, group after group: `starts` and `sizes`.
            self.members: np.ndarray | None = np.argsort(codes, kind="stable")
            self.sizes = np.bincount(codes)
            self.starts = np.cumsum(self.sizes) - self.sizes
        else:
            self.members = None

    def rng(self, pipeline_id: str, adapter: str, step: int) -> np.random.Generator:
        salt = zlib.crc32(f"{pipeline_id}/{adapter}".encode())
        return np.random.default_rng([self.seed, salt, step])

    def sample(
        self, pipeline_id: str, adapter: str, step: int, num_prompts: int, samples_per_prompt: int
    ) -> Batch:
        rng = self.rng(pipeline_id, adapter, step)
        if self.members is None:
            rows = rng.integers(0, len(self.response), num_prompts * samples_per_prompt)
        else:
            rows = self._sample_groups(rng, num_prompts, samples_per_prompt)
        return Batch(self.prompt[rows], self.response[rows])

    def _sample_groups(self, rng: np.random.Generator, num_prompts: int, k: int) -> np.ndarray:
        """Row numbers of `num_prompts` random groups, `k` samples from each (prompt after
        prompt): without replacement from a group of at least `k`, with it from a smaller one.
        All groups at once: a group's k smallest of uniform random keys are a uniformly random
        k-subset of it, in random order (as `Generator.choice` per group, ~10x faster)."""
        assert self.members is not None
        picked = rng.integers(0, len(self.sizes), num_prompts)
        sizes, starts = self.sizes[picked], self.starts[picked]
        offsets = np.empty((num_prompts, k), dtype=np.int64)
        small = sizes < k
        if small.any():
            draws = rng.random((int(small.sum()), k)) * sizes[small, None]
            offsets[small] = draws.astype(np.int64)
        big = ~small
        if big.any():
            big_sizes = sizes[big]
            segment_starts = np.cumsum(big_sizes) - big_sizes
            segment = np.repeat(np.arange(len(big_sizes)), big_sizes)
            order = _order_within_segments(segment, rng.random(int(big_sizes.sum())))
            first_k = (segment_starts[:, None] + np.arange(k)).ravel()
            offsets[big] = (order[first_k] - np.repeat(segment_starts, k)).reshape(-1, k)
        chosen: np.ndarray = self.members[(starts[:, None] + offsets).ravel()]
        return chosen


def _order_within_segments(segment: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """`np.lexsort((keys, segment))`: positions sorted by segment, then by key (stable).

    `Generator.random` gives multiples of 2**-53, so key * 2**53 is an exact integer below
    2**53 and (segment << 53) | that is one int64 with the same order: one stable argsort (a
    radix sort, ~20x faster than lexsort's two passes at 8,192 keys, once per simulated step)."""
    if len(segment) == 0 or int(segment[-1]) >= 1 << 10:  # would not fit 63 bits
        return np.lexsort((keys, segment))
    scaled = keys * float(1 << 53)
    combined = (segment.astype(np.int64) << 53) | scaled.astype(np.int64)
    return np.argsort(combined, kind="stable")
