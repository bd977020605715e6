"""rlix.runs.rankless: rank-less time from hand-made progress reports and allocations, checked
by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rlix.runs.rankless import open_rollouts, rankless, rankless_by_job


def _events(path: Path, *reports: tuple[float, str, str | None, float]) -> Path:
    lines = [json.dumps({"header": {}})]
    for now_s, pid, adapter, remaining in reports:
        event = {"type": "RolloutProgressed", "now": now_s, "pipeline_id": pid, "remaining": remaining,
                 "adapter": adapter}
        lines.append(json.dumps({"event": event, "decisions": []}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_rankless_by_hand(tmp_path: Path) -> None:
    # Job a has work 10-30 and again from 50 to the end (60). Job b has two adapters, x with work
    # 12-20 and y 15-40, so b has work 12-40.
    events = _events(tmp_path / "events.jsonl",
                     (10.0, "a", None, 5.0), (12.0, "b", "x", 3.0), (15.0, "b", "y", 2.0), (20.0, "b", "x", 0.0),
                     (30.0, "a", None, 0.0), (40.0, "b", "y", 0.0), (50.0, "a", None, 1.0))
    spans = open_rollouts(events, end_s=60.0)
    assert sorted(spans) == [("a", 10.0, 30.0), ("a", 50.0, 60.0), ("b", 12.0, 40.0)]
    allocations = pd.DataFrame(
        [("a", "actor_infer", 15.0, 25.0), ("a", "actor_infer", 16.0, 20.0), ("b", "actor_infer", 12.0, 18.0),
         ("b", "actor_infer", 30.0, 35.0), ("a", "actor_train", 20.0, 24.0)],
        columns=["pipeline_id", "cluster", "t_start", "t_end"])
    row = rankless(spans, allocations, start_s=14.0)
    # From 14 s: a has no rank 14-15, 25-30 and 50-60 (16 s); b 18-30 and 35-40 (17 s), of which
    # 20-24 while a's gang holds GPUs.
    assert row["rankless_s"] == pytest.approx(16.0 + 17.0)
    assert row["rankless_in_gangs_s"] == pytest.approx(4.0)
    assert row["most_rankless_s"] == pytest.approx(17.0)
    per_job = rankless_by_job(spans, allocations, start_s=14.0)
    assert per_job.loc["a"].tolist() == pytest.approx([16.0, 0.0])
    assert per_job.loc["b"].tolist() == pytest.approx([17.0, 4.0])
    # over the whole run a also waits 10-14 (4 s more); b's work starts at 12 with a rank
    assert rankless_by_job(spans, allocations)["rankless_s"].tolist() == pytest.approx([20.0, 17.0])
