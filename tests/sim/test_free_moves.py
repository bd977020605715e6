"""Moves that take no time (rlix.sim.cost_fields.FREE_MOVES) leave the policy's rounds at one
instant to settle: a decision that another undoes at the same instant repeats for ever, which
the run loop stops with a LivelockError (rlix.runs.loop) instead of hanging.

lab-day's first hour has both such cycles the rlix planner once had: a first bundle found by
relocation whose displaced rank was put on a home being reclaimed for its owner (at 1,459 s
on seed 0), and a pipeline whose every rank was reclaimed lent a home kept back whose loans
were due for reclaim too (at 3,632 s)."""

from __future__ import annotations

from rlix.scenarios import load_scenario
from rlix.sim.api import new_simulation
from rlix.sim.cost_fields import FREE_MOVES


def test_lab_day_first_hour_with_free_moves_settles() -> None:
    scenario = load_scenario("lab-day")
    scenario = scenario.model_copy(update={"seed": 0, "costs": {**scenario.costs, **FREE_MOVES}})
    sim = new_simulation(scenario)
    assert sim.run(3_700.0, None) == 3_700.0  # a livelock would raise LivelockError
    assert sim.loop.num_events > 10_000  # the hour ran: jobs came, rolled out and trained
    assert sim.num_unfinished < len(scenario.pipelines)
