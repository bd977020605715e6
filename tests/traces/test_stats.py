"""Inspect statistics: percentiles, the longest-10% token share, cap hits, per pipeline."""

from __future__ import annotations

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
