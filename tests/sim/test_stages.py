"""Start-up places (rlix.sim.stages.startup_places): how many pipelines start together and in
which order, checked by hand."""

from __future__ import annotations

from types import SimpleNamespace

from rlix.sim.stages import startup_places


def test_pipelines_arriving_together_count_each_other_in_scenario_order() -> None:
    arrivals = {"a": 0.0, "b": 0.0, "late": 5.0, "c": 0.0, "later": 9.0, "d": 5.0}
    pipelines = {pid: SimpleNamespace(arrival_s=t) for pid, t in arrivals.items()}
    assert startup_places(pipelines) == {
        "a": (3.0, 0.0), "b": (3.0, 1.0), "c": (3.0, 2.0),
        "late": (2.0, 0.0), "d": (2.0, 1.0),
        "later": (1.0, 0.0),
    }


def test_no_pipelines_no_places() -> None:
    assert startup_places({}) == {}
