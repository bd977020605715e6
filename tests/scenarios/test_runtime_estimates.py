"""A job's runtime estimate given in the scenario (`runtime_estimate_s`, a Slurm user's time
limit): carried into the core's spec for both drivers, kept by the simulator over the one it
would simulate, inherited from a stream's template, refused when not a positive number."""

from __future__ import annotations

from typing import Any

import pytest

from rlix.scenarios import ScenarioError, load_scenario, parse_scenario
from rlix.scenarios.load import validate_scenario


def _blog(estimates: dict[str, float]) -> dict[str, Any]:
    data = load_scenario("blog-4on12").model_dump(mode="json", exclude_none=True)
    for pipeline in data["pipelines"]:
        if pipeline["id"] in estimates:
            pipeline["runtime_estimate_s"] = estimates[pipeline["id"]]
    return data


def test_the_spec_carries_the_given_estimate() -> None:
    specs = validate_scenario(_blog({"job0": 300.0})).pipeline_specs("rlix")
    assert specs["job0"].runtime_estimate_s == 300.0
    assert specs["job1"].runtime_estimate_s is None


def test_the_simulator_keeps_a_given_estimate_and_simulates_the_rest() -> None:
    from rlix.sim.api import new_simulation, runtime_estimates

    scenario = validate_scenario(_blog({"job0": 300.0}))
    sim = new_simulation(scenario)
    assert sim.specs["job0"].runtime_estimate_s == 300.0
    simulated = sim.specs["job1"].runtime_estimate_s
    assert simulated is not None and simulated != 300.0  # its time alone on its home
    every = validate_scenario(_blog({f"job{i}": 100.0 * (i + 1) for i in range(4)}))
    assert runtime_estimates(every) is None  # nothing to simulate
    assert [s.runtime_estimate_s for s in new_simulation(every).specs.values()] == [100.0, 200.0, 300.0, 400.0]


def test_a_template_gives_its_jobs_the_estimate() -> None:
    from tests.scenarios.test_streams import TEMPLATE

    text = TEMPLATE.replace("SEED", "7").replace("    max_staleness: 1\n", "    max_staleness: 1\n    runtime_estimate_s: 900\n")
    scenario = parse_scenario(text, file="s.yaml")
    assert scenario.pipelines and all(p.runtime_estimate_s == 900 for p in scenario.pipelines)


def test_the_executor_plan_carries_it() -> None:
    pytest.importorskip("ray")
    from rlix.executor.run import plan

    data = load_scenario("cpu-queue").model_dump(mode="json", exclude_none=True)
    data["pipelines"][0]["runtime_estimate_s"] = 42.0
    the_plan = plan(validate_scenario(data))
    assert the_plan.specs[data["pipelines"][0]["id"]].runtime_estimate_s == 42.0


@pytest.mark.parametrize("bad", [0, -5, "soon"])
def test_a_bad_estimate_is_refused(bad: object) -> None:
    data = _blog({})
    data["pipelines"][0]["runtime_estimate_s"] = bad
    with pytest.raises(ScenarioError, match="runtime_estimate_s"):
        validate_scenario(data)
