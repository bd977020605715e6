"""Synthetic rollout-length traces from a seeded numpy generator: `agentic` and `math`.

The length model is the one WORKLOADS.md states (an assumption: no public per-sample RL length
log exists):

    log L_ij = mu_t + u_i + eps_ij,   u_i ~ N(0, sigma_prompt²),  eps_ij ~ N(0, sigma_sample²)
    mu_t     = ln(median) + drift · t / (steps − 1)
    L_ij     = min(round(exp(log L_ij)), L_max),   capped_ij = (L_ij == L_max)

for step t, prompt (group) i and sample j of that prompt. Total sigma 0.8 / 1.0 / 1.3 puts
32% / 39% / 51% of tokens in the longest 10% of samples (WORKLOADS.md); the agentic shape uses
sqrt(0.8² + 0.8²) ≈ 1.13 with drift and a 32k cap, which lands at ~40% (35–50% over seeds), the
share long-horizon RL reports describe (Seer, arXiv 2511.14617). Agentic rollouts also get
turns, roughly one per `tokens_per_turn` generated, and tool time per call between turns.

The same seed gives the same trace, row for row, on any machine (numpy's PCG64 stream).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import pandas as pd

from rlix.traces.errors import TraceError
from rlix.traces.schema import MAX_TOKENS

Kind = Literal["agentic", "math"]


@dataclass(frozen=True)
class Shape:
    """Everything that makes one kind of synthetic trace; see the module docstring."""

    median_tokens: float  # median response length at the first step
    drift: float  # log-length added by the last step (responses grow as RL trains)
    sigma_prompt: float  # spread of per-prompt difficulty u_i
    sigma_sample: float  # spread of samples of one prompt eps_ij
    max_tokens: int  # the length cap L_max
    group_size: int  # samples per prompt
    prompts_per_step: int
    prompt_median: float  # prompt tokens: lognormal, one draw per prompt
    prompt_sigma: float
    tokens_per_turn: float | None = None  # None: single-turn
    max_turns: int = 1
    tool_call_median_s: float = 0.0  # tool time per call: lognormal
    tool_call_sigma: float = 0.0


SHAPES: Final[dict[Kind, Shape]] = {
    # Long-horizon agentic RL: caps of 32k–98k tokens and a heavy tail (Seer, arXiv 2511.14617).
    "agentic": Shape(
        median_tokens=2000,
        drift=0.5,
        sigma_prompt=0.8,
        sigma_sample=0.8,
        max_tokens=32_768,
        group_size=8,
        prompts_per_step=32,
        prompt_median=1500,
        prompt_sigma=0.4,
        tokens_per_turn=1024,
        max_turns=50,
        tool_call_median_s=1.5,
        tool_call_sigma=1.0,
    ),
    # RLVR on math: shorter, lighter tail, a 4k cap hit by ~1% of samples, more in late steps
    # (RollPacker, arXiv 2509.21009: 4k cap, ordinary steps max out at 1.2–1.7k; DAPO: 16k).
    "math": Shape(
        median_tokens=600,
        drift=0.6,
        sigma_prompt=0.5,
        sigma_sample=0.45,
        max_tokens=4_096,
        group_size=16,
        prompts_per_step=32,
        prompt_median=150,
        prompt_sigma=0.4,
    ),
}
KINDS: Final[tuple[Kind, ...]] = tuple(SHAPES)


def generate(
    kind: Kind,
    rows: int,
    seed: int,
    *,
    pipeline: str | None = None,
    max_tokens: int | None = None,
) -> pd.DataFrame:
    """A synthetic trace of `rows` samples of `kind`, deterministic for `seed`.

    Columns: pipeline (only if given), step, group, response_tokens, prompt_tokens, num_turns,
    tool_time_s, capped. `max_tokens` overrides the shape's cap.
    """
    if kind not in SHAPES:
        raise TraceError(f"unknown trace kind {kind!r}; kinds are {', '.join(KINDS)}")
    if rows < 1:
        raise TraceError(f"rows must be at least 1, not {rows}")
    if seed < 0:
        raise TraceError(f"seed must be 0 or more, not {seed}")
    if pipeline is not None and not pipeline.strip():
        raise TraceError(f"pipeline name {pipeline!r} is empty")
    shape = SHAPES[kind]
    cap = shape.max_tokens if max_tokens is None else max_tokens
    if not 1 <= cap <= MAX_TOKENS:
        raise TraceError(f"max_tokens must be between 1 and {MAX_TOKENS:,}, not {cap}")
    rng = np.random.default_rng(seed)
    group = np.arange(rows) // shape.group_size
    step = group // shape.prompts_per_step
    lengths = _lengths(rng, shape, step, group, cap)
    prompt = _lognormal(rng, shape.prompt_median, shape.prompt_sigma, int(group[-1]) + 1)[group]
    turns, tool_time = _turns_and_tools(rng, shape, lengths)
    columns: dict[str, object] = {} if pipeline is None else {"pipeline": pipeline}
    frame = pd.DataFrame(
        {
            **columns,
            "step": step.astype("int64"),
            "group": group.astype("int64"),
            "response_tokens": lengths,
            "prompt_tokens": np.clip(np.rint(prompt), 1, MAX_TOKENS).astype("int64"),
            "num_turns": turns,
            "tool_time_s": tool_time,
            "capped": lengths >= cap,
        }
    )
    if pipeline is not None:
        frame["pipeline"] = frame["pipeline"].astype("string")
    return frame


def _lengths(
    rng: np.random.Generator, shape: Shape, step: np.ndarray, group: np.ndarray, cap: int
) -> np.ndarray:
    steps = int(step[-1]) + 1
    mu = math.log(shape.median_tokens) + shape.drift * step / max(steps - 1, 1)
    difficulty = rng.normal(0.0, shape.sigma_prompt, int(group[-1]) + 1)[group]
    noise = rng.normal(0.0, shape.sigma_sample, len(group))
    lengths: np.ndarray = np.clip(np.rint(np.exp(mu + difficulty + noise)), 1, cap)
    return lengths.astype("int64")


def _turns_and_tools(
    rng: np.random.Generator, shape: Shape, lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Turns: 1 + Poisson(L / tokens_per_turn), at most max_turns; one tool call between turns."""
    if shape.tokens_per_turn is None:
        return np.ones(len(lengths), "int64"), np.zeros(len(lengths), "float64")
    turns = 1 + rng.poisson(lengths / shape.tokens_per_turn)
    turns = np.minimum(turns, shape.max_turns).astype("int64")
    per_call = _lognormal(rng, shape.tool_call_median_s, shape.tool_call_sigma, len(lengths))
    # Millisecond resolution keeps CSV round trips exact and files small.
    return turns, np.round((turns - 1) * per_call, 3)


def _lognormal(rng: np.random.Generator, median: float, sigma: float, size: int) -> np.ndarray:
    return np.exp(math.log(median) + rng.normal(0.0, sigma, size))
