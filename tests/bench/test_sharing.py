"""bench/sharing.py on the bundled tiny scenario: each row's figures are its policy's in a
comparison run directly, with the ceiling and the JCT floor, and several seeds average."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlix.scenarios import load_scenario
from rlix.sim.compare import compare
from tests.bench.bench_module import BENCH, load


def test_rows_are_the_comparisons_figures_with_its_floor_and_ceiling() -> None:
    sharing = load("sharing")
    rows = sharing.bench(["tiny"], ["rlix", "static"], quiet=True, seeds=[None])
    comparison = compare(load_scenario("tiny"), ["rlix", "static"])
    floor_s = comparison.mean_jct_floor_s()
    assert floor_s is not None and [r["policy"] for r in rows] == ["rlix", "static"]
    for row in rows:
        jobs = comparison.summaries[row["policy"]]["overall"]["jobs"]
        assert row["jobs.mean_jct_s"] == pytest.approx(jobs["mean_jct_s"])
        assert row["mean_jct_floor_s"] == pytest.approx(floor_s)
        assert row["jct_over_floor"] == pytest.approx(jobs["mean_jct_s"] / floor_s) and row["jct_over_floor"] >= 0.999
        assert row["ceiling_steps_per_hour"] == pytest.approx(comparison.ceiling_steps_per_hour())
    seeds = sharing.bench(["tiny"], ["rlix"], quiet=True, seeds=[0, 1])
    (mean,) = seeds
    singles = [sharing.bench(["tiny"], ["rlix"], quiet=True, seeds=[seed])[0] for seed in (0, 1)]
    assert mean["num_seeds"] == 2
    assert mean["mean_jct_floor_s"] == pytest.approx((singles[0]["mean_jct_floor_s"] + singles[1]["mean_jct_floor_s"]) / 2)


def test_the_table_names_its_columns_and_bad_names_are_refused() -> None:
    done = subprocess.run([sys.executable, str(BENCH / "sharing.py"), "--scenarios", "tiny", "--policies", "rlix"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "JCT floor s" in done.stdout and "JCT / floor" in done.stdout and "of ceiling" in done.stdout
    bad = subprocess.run([sys.executable, str(BENCH / "sharing.py"), "--scenarios", "nosuch"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "argument --scenarios: unknown nosuch" in bad.stderr
