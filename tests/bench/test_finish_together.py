"""bench/finish_together.py on the bundled tiny scenario: each row is a plain rlix run at its
gamma, the plot is written, bad gammas are refused, and --help gives the default gammas."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from rlix.scenarios import load_scenario
from rlix.sim import simulate
from tests.bench.bench_module import BENCH, load


def test_rows_match_plain_runs_at_each_gamma(tmp_path: Path) -> None:
    finish = load("finish_together")
    rows = finish.bench(["tiny"], [0.0, 4.0], seeds=0, workers=1, quiet=True)
    assert [(row["scenario"], row["gamma"]) for row in rows] == [("tiny", 0.0), ("tiny", 4.0)]
    base = load_scenario("tiny")
    for row in rows:
        scenario = base.with_policy("rlix", {**base.policy.config.model_dump(), "finish_together": row["gamma"]})
        overall = simulate(scenario, plots=False).summary["overall"]
        assert row["steps_per_hour"] == pytest.approx(overall["steps_per_hour"])
        assert row["mean_jct_s"] == pytest.approx(overall["jobs"]["mean_jct_s"])
    path = tmp_path / "trade.png"
    finish.plot(rows, str(path))
    assert path.stat().st_size > 0


def test_gammas_reject_bad_input() -> None:
    finish = load("finish_together")
    assert finish._gammas("4,0,4") == [0.0, 4.0]
    for text in ("", "-1", "a,1", "inf", "nan"):
        with pytest.raises(argparse.ArgumentTypeError):
            finish._gammas(text)


def test_the_help_gives_the_default_gammas() -> None:
    finish = load("finish_together")
    done = subprocess.run([sys.executable, str(BENCH / "finish_together.py"), "--help"], capture_output=True,
                          text=True, check=True)
    default = ",".join(f"{g:g}" for g in finish.DEFAULT_GAMMAS)
    assert f"default: {default}" in " ".join(done.stdout.split())
