"""What `rlix-sim trace inspect` reports about a trace: length percentiles, tail share, cap hits.

Cap hits are marked once for the whole trace and each pipeline's share is taken from the same
marks, so the pipelines' hit counts add up to the trace's. A `capped` column marks them; without
one, a sample is taken as capped when it is as long as the longest sample of its pipeline (caps
are set per pipeline: a math pipeline's 4k cap is not an agentic one's 32k), or of the whole
trace when it has no pipeline column.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from rlix.traces.schema import CAPPED, RESPONSE_TOKENS


@dataclass(frozen=True)
class LengthStats:
    """Statistics of `response_tokens` over a set of samples."""

    rows: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: int
    top10_token_share: float  # share of all tokens in the longest 10% of samples
    cap_hit_share: float  # share of samples at the cap (see TraceStats.cap_source)


@dataclass(frozen=True)
class TraceStats(LengthStats):
    """LengthStats of a whole trace, and of each pipeline when the trace has a pipeline column."""

    # "capped column" when the trace records cap hits, else where a cap shows in a log that does
    # not record it: "at max length", samples equal to the longest one, or, when the trace has
    # a pipeline column, "at pipeline max length", samples equal to their pipeline's longest.
    cap_source: str = "at max length"
    pipelines: dict[str, LengthStats] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        """Plain JSON-ready dict; keys rows, mean, p50, p90, p99, max, top10_token_share first."""
        return asdict(self)


def top_share(lengths: np.ndarray, fraction: float = 0.1) -> float:
    """Share of all tokens in the longest `fraction` of samples (at least one sample)."""
    ordered = np.sort(lengths)[::-1]
    count = max(1, math.ceil(len(ordered) * fraction))
    return float(ordered[:count].sum() / ordered.sum())


def length_stats(lengths: np.ndarray, capped: np.ndarray | None = None) -> LengthStats:
    """LengthStats of one array of positive lengths; `capped` marks cap hits when known."""
    lengths = np.asarray(lengths, dtype="int64")
    hits = lengths == lengths.max() if capped is None else np.asarray(capped, dtype=bool)
    p50, p90, p99 = np.percentile(lengths, [50, 90, 99])
    return LengthStats(
        rows=len(lengths),
        mean=float(lengths.mean()),
        p50=float(p50),
        p90=float(p90),
        p99=float(p99),
        max=int(lengths.max()),
        top10_token_share=top_share(lengths),
        cap_hit_share=float(hits.mean()),
    )


def trace_stats(trace: pd.DataFrame) -> TraceStats:
    """Statistics of a validated trace (as read_trace returns it)."""
    lengths = trace[RESPONSE_TOKENS].to_numpy(dtype="int64")
    # Each pipeline's row positions, by name (positions: the index need not be 0..n-1).
    groups: dict[str, np.ndarray] = (
        {str(name): rows for name, rows in trace.groupby("pipeline").indices.items()}
        if "pipeline" in trace.columns
        else {}
    )
    if CAPPED in trace.columns:
        hits, cap_source = trace[CAPPED].to_numpy(dtype=bool), "capped column"
    elif groups:
        hits, cap_source = np.zeros(len(lengths), dtype=bool), "at pipeline max length"
        for rows in groups.values():
            hits[rows] = lengths[rows] == lengths[rows].max()
    else:
        hits, cap_source = lengths == lengths.max(), "at max length"
    # Every figure below takes its cap hits from `hits`, never from a rule of its own, so the
    # pipelines' counts add up to the trace's.
    overall = length_stats(lengths, hits)
    pipelines = {
        name: length_stats(lengths[rows], hits[rows]) for name, rows in sorted(groups.items())
    }
    return TraceStats(**asdict(overall), cap_source=cap_source, pipelines=pipelines)

