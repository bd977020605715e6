"""Inspect statistics: percentiles, the longest-10% token share, cap hits, per pipeline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rlix.traces import trace_stats
from rlix.traces.stats import length_stats, top_share


def test_top_share() -> None:
    # 10 samples: the longest one (10% of them) carries 91 of 100 tokens.
    assert top_share(np.array([91] + [1] * 9)) == pytest.approx(0.91)
    # 11 samples: the longest 10% rounds up to two samples.
    assert top_share(np.array([5, 5] + [1] * 9)) == pytest.approx(10 / 19)
    assert top_share(np.array([7])) == 1.0


def test_length_stats_infers_cap_hits_from_max_without_capped_column() -> None:
    stats = length_stats(np.array([1, 2, 3, 4, 10, 10]))
    assert (stats.rows, stats.max, stats.p50) == (6, 10, 3.5)
    assert stats.cap_hit_share == pytest.approx(2 / 6)


def test_trace_stats_uses_capped_column_and_splits_pipelines() -> None:
    trace = pd.DataFrame(
        {
            "pipeline": pd.array(["a", "a", "b", "b"], dtype="string"),
            "response_tokens": [10, 20, 30, 40],
            "capped": [False, True, False, False],
        }
    )
    stats = trace_stats(trace)
    assert stats.cap_source == "capped column"
    assert stats.cap_hit_share == 0.25
    assert set(stats.pipelines) == {"a", "b"}
    assert stats.pipelines["a"].cap_hit_share == 0.5
    assert stats.pipelines["b"].mean == 35
    keys = list(stats.as_dict())
    assert keys[:7] == ["rows", "mean", "p50", "p90", "p99", "max", "top10_token_share"]


def _hits(share: float, rows: int) -> int:
    count = share * rows
    assert count == pytest.approx(round(count))
    return round(count)


def test_cap_hits_of_pipelines_add_up_to_the_trace_without_capped_column() -> None:
    """Without a capped column, a sample is a cap hit when it is its pipeline's longest, and the
    trace's count is the sum of the pipelines': a at 20 has 2 of 4, b at 100 has 3 of 5, so the
    trace has 5 of 9 (not 3, the samples at the trace's own max of 100)."""
    trace = pd.DataFrame(
        {
            "pipeline": pd.array(["a", "b", "a", "b", "b", "a", "b", "a", "b"], dtype="string"),
            "response_tokens": [10, 100, 20, 50, 100, 20, 100, 5, 7],
        }
    )
    stats = trace_stats(trace)
    assert stats.cap_source == "at pipeline max length"
    a, b = stats.pipelines["a"], stats.pipelines["b"]
    assert (a.rows, _hits(a.cap_hit_share, a.rows)) == (4, 2)
    assert (b.rows, _hits(b.cap_hit_share, b.rows)) == (5, 3)
    assert _hits(stats.cap_hit_share, stats.rows) == 5
    assert stats.cap_hit_share == pytest.approx(5 / 9)


def test_cap_hits_of_pipelines_add_up_to_the_trace_with_capped_column() -> None:
    # Hand count: a has 1 of 3 capped, b 2 of 2, so the trace 3 of 5; the lengths do not matter.
    trace = pd.DataFrame(
        {
            "pipeline": pd.array(["b", "a", "a", "b", "a"], dtype="string"),
            "response_tokens": [5, 9, 9, 3, 1],
            "capped": [True, False, True, True, False],
        }
    )
    stats = trace_stats(trace)
    assert _hits(stats.pipelines["a"].cap_hit_share, 3) == 1
    assert _hits(stats.pipelines["b"].cap_hit_share, 2) == 2
    assert _hits(stats.cap_hit_share, 5) == 3


def test_cap_hits_without_pipelines_are_at_the_trace_max() -> None:
    stats = trace_stats(pd.DataFrame({"response_tokens": [4, 9, 9, 2]}))
    assert (stats.cap_source, stats.cap_hit_share, stats.pipelines) == ("at max length", 0.5, {})


def test_inspect_says_where_cap_hits_come_from(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "t.csv"
    path.write_text("pipeline,response_tokens\na,10\na,20\nb,30\nb,30\nb,5\n")
    code, out, _ = run_cli("trace", "inspect", path)
    assert code == 0
    # a: 1 of 2 at its max 20; b: 2 of 3 at 30; the trace 3 of 5.
    assert "cap hits 60.00% (samples at their pipeline's max length; the trace has no capped column)" in out
    assert "50.00%" in out.splitlines()[-2] and "66.67%" in out.splitlines()[-1]
