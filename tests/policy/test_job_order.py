"""rlix's job order (rlix.policy.job_order): with a home-load limit, which waiting job starts.

Gang jobs as in test_queueing (each holds its whole sized home for its duration). The start
times below are worked out by hand from the rule: the homes running cover at most
max_home_load x the pool; the waiting job with the smallest estimate less the time it has
waited starts first ("shortest"), or the earliest admitted ("arrival").
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from rlix.policy import PolicyConfig, SpecError, Topology
from tests.policy.test_queueing import GangJob, _no_gpu_shared_at_once, run_queue, sized_jobs

SHORTEST = PolicyConfig(job_order="shortest", max_home_load=1.0)
ARRIVAL = PolicyConfig(max_home_load=1.0)


def test_shortest_first_by_hand() -> None:
    """8 GPUs, homes of 4, so two jobs at once once x (all 8, 5 s) ends. a (30 s), b (10) and
    c (20) come at 1, d (5) at 2. At 5 the keys are a 26, b 6, c 16, d 2: d and b start; at 10
    d ends (a 21, c 11): c starts; at 15 b ends and a starts."""
    jobs = [GangJob("x", 0, 5, size=8), GangJob("a", 1, 30, size=4), GangJob("b", 1, 10, size=4),
            GangJob("c", 1, 20, size=4), GangJob("d", 2, 5, size=4)]
    run = run_queue("rlix", Topology(1, 8), jobs, SHORTEST)
    assert run.start_s == {"x": 0, "d": 5, "b": 5, "c": 10, "a": 15}
    # In arrival order: a and b at 5, c when b ends (15), d when a and c end (35).
    run = run_queue("rlix", Topology(1, 8), jobs, ARRIVAL)
    assert run.start_s == {"x": 0, "a": 5, "b": 5, "c": 15, "d": 35}


def test_a_long_job_is_not_starved_by_a_stream_of_short_ones() -> None:
    """4 GPUs, one job at a time. x (10 s) runs from 0; L (50 s) comes at 1; a short job (10 s)
    comes every 10 s from 2. Each time one ends, L's key (50 - waited) is compared with the
    newest short job's (10 - its wait of 8): 41, 31, 21, 11 lose to 2, and at 50 L's 1 wins."""
    jobs = [GangJob("x", 0, 10, size=4), GangJob("L", 1, 50, size=4)]
    jobs += [GangJob(f"s{i}", 2 + 10 * i, 10, size=4) for i in range(6)]
    run = run_queue("rlix", Topology(1, 4), jobs, SHORTEST)
    assert [run.start_s[f"s{i}"] for i in range(4)] == [10, 20, 30, 40]
    assert run.start_s["L"] == 50
    assert run.start_s["s4"] == 100 and run.start_s["s5"] == 110


def test_a_job_without_an_estimate_waits_for_those_with_one() -> None:
    jobs = [GangJob("x", 0, 10, size=4), GangJob("n", 1, 5, size=4, estimate=False), GangJob("e", 2, 50, size=4)]
    run = run_queue("rlix", Topology(1, 4), jobs, SHORTEST)
    assert run.start_s == {"x": 0, "e": 10, "n": 60}


def test_without_a_limit_the_order_changes_nothing() -> None:
    """Every job runs at once (the order only decides who starts when not all may): their
    gangs take turns on the shared home in the request queue's order, as by default."""
    jobs = [GangJob("a", 0, 30, home=(0, 1, 2, 3)), GangJob("b", 0, 10, home=(0, 1, 2, 3))]
    run = run_queue("rlix", Topology(1, 4), jobs, PolicyConfig(job_order="shortest"))
    assert run.start_s == run_queue("rlix", Topology(1, 4), jobs).start_s == {"a": 0, "b": 30}


@settings(max_examples=150, deadline=None)
@given(sized_jobs())
def test_every_job_finishes_under_either_order(case: tuple[Topology, list[GangJob]]) -> None:
    topology, jobs = case
    for config in (SHORTEST, ARRIVAL, PolicyConfig(job_order="shortest", max_home_load=2.0)):
        _no_gpu_shared_at_once(run_queue("rlix", topology, jobs, config))  # run_queue: all end


def test_bad_settings_are_refused() -> None:
    with pytest.raises(SpecError, match="job_order"):
        PolicyConfig(job_order="sjf").validate()
    with pytest.raises(SpecError, match="max_home_load"):
        PolicyConfig(max_home_load=-1.0).validate()
