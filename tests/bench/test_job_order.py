"""bench/job_order.py on the bundled tiny scenario: one row per variant, in order, and the
default variant's figures are those of a plain run of the scenario under rlix."""

from __future__ import annotations

import pytest

from rlix.scenarios import load_scenario
from rlix.sim import simulate
from rlix.sim.alone import alone_jct_s
from tests.bench.bench_module import load


def test_rows_match_single_runs() -> None:
    job_order = load("job_order")
    rows = job_order.bench("tiny", workers=1, quiet=True)
    assert [r["variant"] for r in rows] == [label for label, _p, _o in job_order.VARIANTS]
    scenario = load_scenario("tiny")
    plain = simulate(scenario.with_policy("rlix"), plots=False, alone_s=alone_jct_s(scenario)).summary["overall"]
    first = rows[0]
    assert first["mean_jct_s"] == pytest.approx(plain["jobs"]["mean_jct_s"])
    assert first["p95_slowdown"] == pytest.approx(plain["jobs"]["p95_slowdown"])
    assert first["steps_per_hour"] == pytest.approx(plain["steps_per_hour"])
