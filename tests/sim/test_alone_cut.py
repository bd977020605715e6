"""Alone times of a scenario cut at `max_time_s`: an alone run that did not end in the time
its pipeline had is no alone time (its slowdown is unknown), but still a runtime estimate (what
the job is known to take at least)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from rlix.scenarios import load_scenario
from rlix.scenarios.load import validate_scenario
from rlix.sim.alone import alone_jct_s
from rlix.sim.cli import main


def _tiny(max_time_s: float | None) -> object:
    data = load_scenario("tiny").model_dump(mode="json", exclude_none=True)
    if max_time_s is not None:
        data["max_time_s"] = max_time_s
    return validate_scenario(data)


def test_an_alone_run_cut_short_is_no_alone_time_but_an_estimate() -> None:
    full = alone_jct_s(_tiny(None))  # type: ignore[arg-type]
    cut_at = min(full.values()) - 1.0  # every alone run is cut
    assert alone_jct_s(_tiny(cut_at)) == {}  # type: ignore[arg-type]
    estimates = alone_jct_s(_tiny(cut_at), cut=True)  # type: ignore[arg-type]
    assert set(estimates) == set(full) and all(value <= cut_at for value in estimates.values())
    assert alone_jct_s(_tiny(max(full.values()) + 1.0)) == full  # type: ignore[arg-type]


def test_a_cut_run_has_no_slowdown_over_its_cut(tmp_path: Path) -> None:
    full = alone_jct_s(_tiny(None))  # type: ignore[arg-type]
    out = tmp_path / "run"
    assert main(["run", "tiny", "--duration-s", str(min(full.values()) - 1.0), "--quiet", "--out", str(out)]) == 0
    jobs = pd.read_parquet(out / "jobs.parquet")
    assert jobs["alone_s"].isna().all() and jobs["slowdown"].isna().all()
    assert json.loads((out / "summary.json").read_text())["overall"]["jobs"]["mean_slowdown"] is None
