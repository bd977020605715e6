"""The contention fit (rlix.sim.contention) on hand-made activity: it finds a slowdown that is
there, and none where there is none."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rlix.sim.contention import busy_spans, fit_contention


def activity(slowdown: float, seed: int = 0) -> pd.DataFrame:
    """Spans of two kinds started at random times; each lasts base * (1 + slowdown * c), c the
    spans already running when it starts (computed as the fit counts them)."""
    rng = np.random.default_rng(seed)
    rows: list[tuple[str, float, float]] = []
    for t in np.sort(rng.uniform(0, 200, 400)):
        running = sum(1 for _k, s, e in rows if s <= t < e)
        kind = "load" if rng.random() < 0.5 else "actor_train"
        base = 0.5 if kind == "load" else 1.5
        rows.append((kind, float(t), float(t + base * (1 + slowdown * running))))
    return pd.DataFrame({
        "pipeline_id": [f"p{i}" for i in range(len(rows))], "cluster": "c", "dp_rank": 0, "gpu": 0,
        "kind": "busy", "stage": [k for k, _s, _e in rows], "t_start": [s for _k, s, _e in rows],
        "t_end": [e for _k, _s, e in rows],
    })


def test_counts_the_spans_running_at_each_start() -> None:
    frame = pd.DataFrame({"pipeline_id": ["a", "b", "c"], "cluster": "x", "dp_rank": 0, "gpu": 0, "kind": "busy",
                          "stage": "actor_train", "t_start": [0.0, 1.0, 5.0], "t_end": [4.0, 2.0, 6.0]})
    assert busy_spans(frame)["concurrent"].tolist() == [0, 1, 0]


@pytest.mark.parametrize("slowdown", [0.0, 0.3])
def test_recovers_the_slowdown_it_was_made_with(slowdown: float) -> None:
    fit = fit_contention([activity(slowdown)])
    assert fit["slowdown_per_busy"] == pytest.approx(slowdown, abs=0.01)
    assert fit["applied"] is False
    if slowdown:
        assert fit["explained"] > 0.9
