"""The lab-day scenarios set rlix's tunables for a stream of jobs (a 300-s no-reversal
interval, loans that pay back twice their moves, tails not held at their busy ranks; on
lab-day's 64 GPUs no drains). The RLix
model they are compared against must not read them, or the comparison would move with rlix's
settings: its run is the same with and without them, on the first 20 minutes of lab-day,
while rlix's is not."""

from __future__ import annotations

import functools
from typing import Any

from rlix.scenarios import load_scenario
from rlix.sim.api import resolve_scenario, simulate

DEFAULTS = {"job_order": "shortest", "max_home_load": 2.5}
STREAM = {**DEFAULTS, "min_rebalance_interval_s": 300.0, "loan_payback": 2.0, "max_drain_s": 0.0, "keep_busy_tail": False}


def _run(policy: str, config: dict[str, Any]) -> tuple[Any, ...]:
    return _run_once(policy, tuple(sorted(config.items())))


@functools.cache
def _run_once(policy: str, config: tuple[tuple[str, Any], ...]) -> tuple[Any, ...]:
    """One run per policy and settings: the RLix model's run with the defaults is compared twice."""
    scenario = resolve_scenario("lab-day", max_time_s=1200.0).with_policy(policy, dict(config))
    result = simulate(scenario, plots=False)
    overall = result.summary["overall"]
    allocations = result.tables["allocations"]
    return overall["steps"], overall["busy_share"], overall["preemptions"], allocations.to_csv()


def test_lab_day_sets_the_stream_settings() -> None:
    config = load_scenario("lab-day").policy.config
    assert (config.min_rebalance_interval_s, config.loan_payback, config.max_drain_s) == (300.0, 2.0, 0.0)
    assert config.keep_busy_tail is False
    bigger = load_scenario("lab-day-256").policy.config  # drains measured worse there
    assert (bigger.min_rebalance_interval_s, bigger.loan_payback, bigger.max_drain_s) == (300.0, 2.0, 4.0)
    assert bigger.keep_busy_tail is False


def test_the_rlix_model_does_not_read_drains() -> None:
    assert _run("gap-ratio", DEFAULTS) == _run("gap-ratio", {**DEFAULTS, "max_drain_s": 0.0})


def test_the_rlix_model_does_not_read_held_tails() -> None:
    assert _run("gap-ratio", DEFAULTS) == _run("gap-ratio", {**DEFAULTS, "keep_busy_tail": False})


def test_the_rlix_model_does_not_read_them() -> None:
    assert _run("gap-ratio", DEFAULTS) == _run("gap-ratio", STREAM)


def test_rlix_does() -> None:
    assert _run("rlix", DEFAULTS) != _run("rlix", STREAM)
