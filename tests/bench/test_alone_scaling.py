"""bench/alone_scaling.py: which nodes a pool size keeps, that a job alone on fewer nodes is no
faster than on the whole pool, and that the whole-pool row is the plain alone-on-pool run."""

from __future__ import annotations

import pytest

from rlix.scenarios import load_scenario
from rlix.sim import simulate
from rlix.sim.api import alone_on_pool
from tests.bench.bench_module import load


def test_home_nodes_come_first() -> None:
    scaling = load("alone_scaling")
    scenario = load_scenario("agentic-4x32")  # agent2's home is GPUs 16-23: node 2
    assert scaling.nodes_kept(scenario, "agent2", 1) == [2]
    assert scaling.nodes_kept(scenario, "agent2", 3) == [2, 0, 1]
    assert scaling.nodes_kept(scenario, "agent0", 2) == [0, 1]
    lost = scaling.on_nodes(scenario, "agent2", 2).faults.events
    assert sorted(tuple(event.lose_gpu) for event in lost) == [tuple(range(8, 16)), tuple(range(24, 32))]
    assert all(event.at_s == 0.0 for event in lost)


def test_whole_pool_row_is_the_alone_run_and_fewer_nodes_are_slower() -> None:
    scaling = load("alone_scaling")
    rows = scaling.bench("agentic-4x32", "agent2", seeds=1, workers=1, quiet=True)
    assert [row["num_nodes"] for row in rows] == [1, 2, 3, 4]
    assert all(row["finished"] for row in rows)
    plain = simulate(alone_on_pool(load_scenario("agentic-4x32").model_copy(update={"seed": 0}), "agent2"),
                     plots=False).summary["overall"]["jobs"]["mean_jct_s"]
    assert rows[-1]["jct_s"] == pytest.approx(plain)
    assert rows[-1]["of_whole_pool"] == pytest.approx(1.0)
    times = [row["jct_s"] for row in rows]
    assert times == sorted(times, reverse=True) and times[0] > times[-1]


def test_a_home_of_two_nodes_starts_at_two() -> None:
    scaling = load("alone_scaling")
    # lab-day's 32B jobs have 16-GPU homes given as a size (2 of its 8-GPU nodes)
    scenario = load_scenario("lab-day")
    big = next(p.id for p in scenario.pipelines if p.id.startswith("ppo32b"))
    assert scenario.pipeline(big).home_size == 16
    rows = scaling.bench("lab-day", big, seeds=1, workers=1, quiet=True)
    assert rows[0]["num_nodes"] == 2 and rows[-1]["num_nodes"] == 8
    assert all(row["finished"] for row in rows)
