"""What `rlix-sim trace inspect` reports about a trace: length percentiles, tail share, cap hits."""

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

    # "capped column" when the trace records cap hits, else "at max length": samples equal to
    # the longest one, which is where a cap shows in a log that does not record it.
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
    capped = trace[CAPPED].to_numpy() if CAPPED in trace.columns else None
    overall = length_stats(trace[RESPONSE_TOKENS].to_numpy(), capped)
    pipelines: dict[str, LengthStats] = {}
    if "pipeline" in trace.columns:
        for name, part in trace.groupby("pipeline", sort=True):
            part_capped = part[CAPPED].to_numpy() if capped is not None else None
            pipelines[str(name)] = length_stats(part[RESPONSE_TOKENS].to_numpy(), part_capped)
    return TraceStats(
        **asdict(overall),
        cap_source="capped column" if capped is not None else "at max length",
        pipelines=pipelines,
    )
