"""Synthetic traces: deterministic for a seed, valid, and with the published tail shape."""

from __future__ import annotations

import numpy as np
import pandas.testing as pdt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlix.traces import TraceError, generate, validate_trace
from rlix.traces.generate import SHAPES
from rlix.traces.stats import top_share

SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


@settings(max_examples=10, deadline=None)
@given(
    seed=SEEDS,
    rows=st.integers(min_value=1, max_value=600),
    kind=st.sampled_from(["agentic", "math"]),
)
def test_same_seed_same_trace(seed: int, rows: int, kind: str) -> None:
    first = generate(kind, rows, seed)  # type: ignore[arg-type]
    pdt.assert_frame_equal(first, generate(kind, rows, seed))  # type: ignore[arg-type]
    assert len(first) == rows
    pdt.assert_frame_equal(validate_trace(first), first)  # generated traces are valid as is


@settings(max_examples=12, deadline=None)
@given(seed=SEEDS)
def test_agentic_longest_tenth_carries_35_to_50_percent(seed: int) -> None:
    trace = generate("agentic", 4096, seed)
    assert 0.35 <= top_share(trace["response_tokens"].to_numpy()) <= 0.50
    # Cap hits are recorded and exactly the samples at the cap.
    cap = SHAPES["agentic"].max_tokens
    assert trace["capped"].tolist() == (trace["response_tokens"] == cap).tolist()
    assert 0 < trace["capped"].mean() < 0.05


@settings(max_examples=8, deadline=None)
@given(seed=SEEDS)
def test_math_is_shorter_with_a_lighter_tail(seed: int) -> None:
    math_trace = generate("math", 4096, seed)
    agentic = generate("agentic", 4096, seed)
    lengths = math_trace["response_tokens"].to_numpy()
    assert top_share(lengths) < top_share(agentic["response_tokens"].to_numpy())
    assert lengths.mean() < agentic["response_tokens"].mean() / 2
    assert lengths.max() <= SHAPES["math"].max_tokens
    assert (math_trace["num_turns"] == 1).all() and (math_trace["tool_time_s"] == 0).all()


def test_agentic_columns_and_structure() -> None:
    trace = generate("agentic", 1000, seed=5, pipeline="agent")
    assert list(trace.columns) == [
        "pipeline",
        "step",
        "group",
        "response_tokens",
        "prompt_tokens",
        "num_turns",
        "tool_time_s",
        "capped",
    ]
    shape = SHAPES["agentic"]
    # Every sample of a prompt shares its step and prompt length.
    per_group = trace.groupby("group").agg(
        steps=("step", "nunique"), prompts=("prompt_tokens", "nunique"), size=("step", "size")
    )
    assert (per_group["steps"] == 1).all() and (per_group["prompts"] == 1).all()
    assert per_group["size"].max() == shape.group_size
    assert trace["step"].max() == (1000 - 1) // (shape.group_size * shape.prompts_per_step)
    # More tokens, more turns; one tool call between turns.
    assert np.corrcoef(trace["response_tokens"], trace["num_turns"])[0, 1] > 0.5
    assert ((trace["num_turns"] == 1) == (trace["tool_time_s"] == 0)).all()


def test_lengths_drift_up_over_steps() -> None:
    trace = generate("agentic", 8192, seed=1)
    medians = trace.groupby("step")["response_tokens"].median()
    assert medians.iloc[-4:].mean() > medians.iloc[:4].mean()


def test_max_tokens_override_and_bad_arguments() -> None:
    trace = generate("math", 2000, seed=2, max_tokens=1024)
    assert trace["response_tokens"].max() == 1024 and trace["capped"].any()
    with pytest.raises(TraceError, match="unknown trace kind"):
        generate("chat", 10, 0)  # type: ignore[arg-type]
    with pytest.raises(TraceError, match="rows must be at least 1"):
        generate("math", 0, 0)
    with pytest.raises(TraceError, match="seed must be 0 or more, not -1"):
        generate("math", 10, -1)  # numpy's own error is a bare ValueError
    with pytest.raises(TraceError, match="pipeline name ' ' is empty"):
        generate("math", 10, 0, pipeline=" ")
