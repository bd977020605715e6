"""Every bundled scenario, cut small, under every policy, with faults: the run passes the core's
invariant checker after every event, the run-table checker of rlix.policy on its folder, and
replays exactly through a fresh core (`rlix-sim check` and `rlix-sim replay` on the folder).

Small: 2 steps per pipeline (and adapter), at most 4 prompts x 4 samples, the first 12
pipelines, on the scenario's own cluster and mappings. Faults: a GPU of the first pipeline's rollout mapping is lost at 60 s
and back at 240 s, 5% of decisions fail, and the last pipeline to arrive is killed at 30 s
after its arrival (a scenario of one pipeline keeps it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlix.policy import POLICIES
from rlix.runs import check, replay
from rlix.scenarios import bundled_scenarios, load_scenario
from rlix.scenarios.load import validate_scenario
from rlix.sim import simulate

#: A stream's first jobs (lab-day has ~270): enough to queue and share, in seconds.
MAX_PIPELINES = 12


def small_with_faults(name: str, policy: str) -> Any:
    data = load_scenario(name).model_dump(mode="json", exclude_none=True)
    data["pipelines"] = pipelines = data["pipelines"][:MAX_PIPELINES]
    for pipeline in pipelines:
        pipeline["steps"] = 2
        pipeline["prompts_per_step"] = min(pipeline["prompts_per_step"], 4)
        pipeline["samples_per_prompt"] = min(pipeline["samples_per_prompt"], 4)
        for adapter in pipeline.get("adapters", []):
            adapter["steps"] = 2
    scenario = load_scenario(name)
    mapping = scenario.pipeline_specs(policy)[pipelines[0]["id"]].rollout.mapping
    first_rollout_gpu = mapping[-1] if mapping else scenario.num_gpus - 1  # a sized home: not placed yet
    events: list[dict[str, Any]] = [{"at_s": 60.0, "lose_gpu": [first_rollout_gpu], "restore_at_s": 240.0}]
    if len(pipelines) > 1:
        last = max(pipelines, key=lambda p: p.get("arrival_s", 0.0))
        events.append({"at_s": last.get("arrival_s", 0.0) + 30.0, "kill": last["id"]})
    data["faults"] = {"events": events, "decision_failure_rate": 0.05}
    data["policy"] = {**data.get("policy", {}), "name": policy}
    data.pop("max_time_s", None)
    return validate_scenario(data)


#: lab-day-256 and lab-day-1024 are lab-day's templates and settings on 4x and 16x pools
#: (tests/scenarios/test_bundled.py checks them against lab-day's file): lab-day covers them
#: here, and cluster-1024 the 1,024-GPU pool, under every policy; lab-day-1024's first jobs took
#: 2 min of the suite for nothing new.
CHECKED = [name for name in bundled_scenarios() if name not in ("lab-day-256", "lab-day-1024")]


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("name", CHECKED)
def test_bundled_scenario_checks_and_replays(name: str, policy: str, tmp_path: Path) -> None:
    scenario = small_with_faults(name, policy)
    result = simulate(scenario, check_invariants=True, out=tmp_path / "run", plots=False)
    killed = {e.kill for e in scenario.faults.events if e.kill is not None}
    # A killed pipeline is over, not unfinished; it was killed before its last step.
    assert result.summary["finished"] and not result.summary["unfinished"]
    steps = result.tables["steps"]
    for pipeline in scenario.pipelines:
        adapters = max(1, len(pipeline.adapters))
        num_steps = (steps["pipeline_id"] == pipeline.id).sum()
        if pipeline.id in killed:
            assert num_steps < 2 * adapters, pipeline.id
        else:
            assert num_steps == 2 * adapters, pipeline.id
    num_rows, _ = check(result.run_dir)
    assert num_rows > 0
    replayed = replay(result.run_dir)
    assert replayed.identical, replayed.divergence
