"""The repeatability floor (rlix.studies.repeatability): every run as the prediction of every other,
the spread of each figure, and how CPU work follows the speed gauge, on hand-made run folders
whose figures are known (the live bench runs the same code on real runs)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from rlix.studies.repeatability import pairwise, summarize


def _run(folder: Path, makespan_s: float, steps: dict[str, float], own_cpu_s: float, speed_s: float) -> Path:
    live = folder / "live"
    live.mkdir(parents=True)
    overall = {"busy_share": 0.4, "loading_share": 0.3, "idle_share": 0.3, "preemptions": 10}
    summary = {"makespan_s": makespan_s, "overall": overall,
               "pipelines": {pid: {"mean_step_time_s": s} for pid, s in steps.items()},
               "machine": {"own_cpu_s": own_cpu_s, "machine_busy_share": 0.97}}
    (live / "summary.json").write_text(json.dumps(summary))
    (folder / "speed.json").write_text(json.dumps({"before": speed_s, "after": speed_s}))
    return live


@pytest.fixture
def runs(tmp_path: Path) -> list[Path]:
    # CPU work proportional to the speed gauge; makespans 40, 44, 50.
    return [_run(tmp_path / "run-1", 40.0, {"ft": 2.0, "lora": 4.0}, 80.0, 0.020),
            _run(tmp_path / "run-2", 44.0, {"ft": 2.2, "lora": 4.0}, 88.0, 0.022),
            _run(tmp_path / "run-3", 50.0, {"ft": 2.5, "lora": 5.0}, 100.0, 0.025)]


def test_every_ordered_pair_is_compared(runs: list[Path]) -> None:
    pairs = pairwise("cpu-demo", runs)
    assert sorted(tuple(p["pair"]) for p in pairs) == [(1, 2), (1, 3), (2, 1), (2, 3), (3, 1), (3, 2)]
    one_as_three = next(p for p in pairs if p["pair"] == [1, 3])
    assert one_as_three["makespan_error"] == pytest.approx(10.0 / 50.0)
    # step time: the mean over pipelines of |pred - meas| / meas
    assert one_as_three["step_time_error"] == pytest.approx((0.5 / 2.5 + 1.0 / 5.0) / 2)


def test_the_floor_and_the_spread(runs: list[Path]) -> None:
    report = summarize("cpu-demo", runs, pairwise("cpu-demo", runs))
    makespans = (40.0, 44.0, 50.0)
    errors = [abs(a - b) / b for a in makespans for b in makespans if a != b]
    assert report["floor_median_makespan_error"] == pytest.approx(statistics.median(errors))
    assert report["floor_max_makespan_error"] == pytest.approx(max(errors))
    assert report["makespan_s"]["cv"] == pytest.approx(statistics.stdev(makespans) / statistics.mean(makespans))
    assert report["makespan_s"]["min"] == 40.0 and report["makespan_s"]["max"] == 50.0
    assert report["step_time_s"]["lora"]["mean"] == pytest.approx(13.0 / 3)
    assert report["speed_vs_own_cpu"] == pytest.approx(1.0)  # CPU-s exactly proportional to the gauge
    assert "sim_median_makespan_error" not in report


def test_identical_runs_have_no_floor(tmp_path: Path) -> None:
    runs = [_run(tmp_path / f"run-{k}", 40.0, {"ft": 2.0}, 80.0, 0.02) for k in (1, 2)]
    report = summarize("static", runs, pairwise("static", runs))
    assert report["floor_max_makespan_error"] == 0.0 and report["floor_max_step_time_error"] == 0.0
    assert report["speed_vs_own_cpu"] is None  # two runs cannot say
