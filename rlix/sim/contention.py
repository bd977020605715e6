"""Contention: how much concurrently busy ranks slow each other, fitted from a run's activity.

On the CPU executor the declared GPUs share a few cores, so two ranks working at once could
each take longer than one alone. `fit_contention` measures it from the `activity` table: each
span of work (a stage, an engine call, a weight load or offload; one row per holder, not per
GPU) is set against the number of other spans running when it started, c, and the model

    duration = base(kind of span) * (1 + slowdown_per_busy * c)

is fitted by least squares (a grid over slowdown_per_busy >= 0, each kind's base in closed
form). The report gives the slope, the residual with it and without it, and the choice made.

The choice (docs/calibration.md): the slope is reported, not applied. In the live CPU runs
measured so far the spans are latency-bound (actor calls, worker wake-ups, process starts),
not compute-bound: the fitted slope explains a few percent of the spread at most, and the
work that does share the cores, process start-up, is modelled where it happens (start-up time
per pipeline started together, rlix.sim.stages.startup_places). The constants are
then fitted at the load the calibration run had, which the predicted runs share.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

#: Slopes tried (slowdown per other busy span), finest near 0 where the answer usually is.
SLOPES = np.concatenate([np.linspace(0.0, 0.5, 101), np.linspace(0.55, 3.0, 50)])


def work_spans(activity: pd.DataFrame) -> pd.DataFrame:
    """The spans of work of an activity table: one per holder (a rank's or a gang's GPUs share
    one), init left out."""
    spans = activity.drop_duplicates(["pipeline_id", "cluster", "dp_rank", "stage", "t_start"])
    return spans[spans["stage"] != "init"]


def busy_spans(activity: pd.DataFrame) -> pd.DataFrame:
    """One row per span of work (`work_spans`): kind, duration_s and concurrent (other spans
    running at its start)."""
    spans = work_spans(activity)
    starts, ends = spans["t_start"].to_numpy(float), spans["t_end"].to_numpy(float)
    order_start, order_end = np.sort(starts), np.sort(ends)
    # Spans started at or before t less those ended at or before t, less the span itself.
    running = np.searchsorted(order_start, starts, "right") - np.searchsorted(order_end, starts, "right") - 1
    return pd.DataFrame({"kind": spans["stage"].to_numpy(object), "duration_s": ends - starts,
                         "concurrent": np.maximum(running, 0)})


def fit_contention(activities: Sequence[pd.DataFrame]) -> dict[str, Any]:
    """The contention fit over the runs' activity tables (see the module docstring)."""
    spans = pd.concat([busy_spans(a) for a in activities], ignore_index=True)
    spans = spans[spans["duration_s"] > 0]
    if spans.empty:
        return {"slowdown_per_busy": 0.0, "samples": 0, "applied": False, "reason": "no spans of work"}
    codes, _kinds = pd.factorize(spans["kind"])
    d = spans["duration_s"].to_numpy(float)
    c = spans["concurrent"].to_numpy(float)
    # Relative residuals: a slow load and a quick stage weigh alike.
    scale = np.bincount(codes, d) / np.bincount(codes)
    best = (np.inf, 0.0)
    for slope in SLOPES:
        factor = 1.0 + slope * c
        base = np.bincount(codes, d * factor) / np.bincount(codes, factor * factor)
        sse = float(np.sum(((d - base[codes] * factor) / scale[codes]) ** 2))
        best = min(best, (sse, float(slope)))
    flat = float(np.sum(((d - scale[codes]) / scale[codes]) ** 2))
    explained = 1.0 - best[0] / flat if flat > 0 else 0.0
    return {
        "slowdown_per_busy": best[1], "samples": len(d), "mean_concurrent": float(c.mean()),
        "relative_rms_without": float(np.sqrt(flat / len(d))), "relative_rms_with": float(np.sqrt(best[0] / len(d))),
        "explained": explained, "applied": False, "reason": _reason(best[1], explained),
    }


def _reason(slope: float, explained: float) -> str:
    if slope == 0.0 or explained < 0.1:
        return "reported, not applied: it explains little of the spread (latency-bound spans); start-up is modelled"
    return ("reported, NOT applied although it explains much of the spread: the simulator does not stretch "
            "spans by concurrency; predictions of busier configs will be short")
