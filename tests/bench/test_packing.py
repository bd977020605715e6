"""bench/packing.py: the packed makespan of a hand-made activity table and the rank-less time of
hand-made progress reports, checked by hand, and on a real run of the bundled tiny scenario its
GPU-seconds adding up to the pool's time."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.bench.bench_module import load


def _rows(*rows: tuple[int, str, str, float, float]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["gpu", "kind", "stage", "t_start", "t_end"])


def test_packed_makespan_by_hand() -> None:
    packing = load("packing").packing
    # 2 GPUs. Init on both 0-10; then GPU 0 trains 10-20, loads 20-22 and rolls out 22-30; GPU 1
    # rolls out 12-18 and sits idle otherwise. The run ends at 35 (5 s after the last work).
    activity = _rows(
        (0, "busy", "init", 0.0, 10.0), (1, "busy", "init", 0.0, 10.0),
        (0, "busy", "actor_train", 10.0, 20.0), (0, "loading", "load", 20.0, 22.0),
        (0, "busy", "rollout", 22.0, 30.0), (1, "busy", "rollout", 12.0, 18.0),
    )
    row = packing(activity, makespan_s=35.0, num_gpus=2)
    assert row["inits_end_s"] == 10.0
    assert row["busy_gpu_s"] == pytest.approx(10 + 8 + 6)
    assert row["loading_gpu_s"] == pytest.approx(2)
    assert row["idle_gpu_s"] == pytest.approx(2 * 20 - 24 - 2)
    # 10 + 24 GPU-s over 2 GPUs + the 5 s after the last work
    assert row["packed_makespan_s"] == pytest.approx(10 + 12 + 5)


def test_interval_across_the_init_end_counts_only_its_part_after() -> None:
    packing = load("packing").packing
    activity = _rows((0, "busy", "init", 0.0, 4.0), (1, "busy", "rollout", 2.0, 8.0))
    row = packing(activity, makespan_s=8.0, num_gpus=2)
    assert row["busy_gpu_s"] == pytest.approx(4.0)
    assert row["idle_gpu_s"] == pytest.approx(4.0)
    assert row["packed_makespan_s"] == pytest.approx(4.0 + 2.0)


def test_tiny_run_adds_up() -> None:
    bench = load("packing")
    row = bench.run_one("tiny", "rlix", 0)
    span_s = row["makespan_s"] - row["inits_end_s"]
    used = row["busy_gpu_s"] + row["loading_gpu_s"] + row["idle_gpu_s"]
    assert row["busy_gpu_s"] > 0 and row["idle_gpu_s"] >= -1e-6
    assert used <= 4 * span_s + 1e-6  # tiny's pool: 4 GPUs; no GPU counted twice
    assert row["inits_end_s"] <= row["packed_makespan_s"] <= row["makespan_s"] + 1e-6
    assert row["ceiling_makespan_s"] is not None and row["ceiling_makespan_s"] > 0
    assert 0 <= row["rankless_in_gangs_s"] <= row["rankless_s"] + 1e-9
    assert row["most_rankless_s"] <= row["rankless_s"] + 1e-9


def test_free_moves_leave_no_loading_time() -> None:
    bench = load("packing")
    priced = bench.run_one("tiny", "rlix", 0)
    free = bench.run_one("tiny", "rlix", 0, free_moves=True)
    assert priced["loading_gpu_s"] > 0  # else the comparison below says nothing
    assert free["loading_gpu_s"] == pytest.approx(0.0, abs=1e-6)
    assert free["steps_per_hour"] > 0


def _events(path: Path, *reports: tuple[float, str, str | None, float]) -> Path:
    lines = [json.dumps({"header": {}})]
    for now_s, pid, adapter, remaining in reports:
        event = {"type": "RolloutProgressed", "now": now_s, "pipeline_id": pid, "remaining": remaining,
                 "adapter": adapter}
        lines.append(json.dumps({"event": event, "decisions": []}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_rankless_by_hand(tmp_path: Path) -> None:
    bench = load("packing")
    # Job a has work 10-30 and again from 50 to the end (60). Job b has two adapters, x with work
    # 12-20 and y 15-40, so b has work 12-40.
    events = _events(tmp_path / "events.jsonl",
                     (10.0, "a", None, 5.0), (12.0, "b", "x", 3.0), (15.0, "b", "y", 2.0), (20.0, "b", "x", 0.0),
                     (30.0, "a", None, 0.0), (40.0, "b", "y", 0.0), (50.0, "a", None, 1.0))
    spans = bench.open_rollouts(events, end_s=60.0)
    assert sorted(spans) == [("a", 10.0, 30.0), ("a", 50.0, 60.0), ("b", 12.0, 40.0)]
    allocations = pd.DataFrame(
        [("a", "actor_infer", 15.0, 25.0), ("a", "actor_infer", 16.0, 20.0), ("b", "actor_infer", 12.0, 18.0),
         ("b", "actor_infer", 30.0, 35.0), ("a", "actor_train", 20.0, 24.0)],
        columns=["pipeline_id", "cluster", "t_start", "t_end"])
    row = bench.rankless(spans, allocations, start_s=14.0)
    # From 14 s: a has no rank 14-15, 25-30 and 50-60 (16 s); b 18-30 and 35-40 (17 s), of which
    # 20-24 while a's gang holds GPUs.
    assert row["rankless_s"] == pytest.approx(16.0 + 17.0)
    assert row["rankless_in_gangs_s"] == pytest.approx(4.0)
    assert row["most_rankless_s"] == pytest.approx(17.0)
