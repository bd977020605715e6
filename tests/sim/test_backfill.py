"""EASY backfill in the simulator: the runtime estimates are each job's simulated time alone on
its home, and a short job behind a blocked one starts early only where it cannot delay it."""

from __future__ import annotations

import yaml

from rlix.scenarios import parse_scenario
from rlix.sim import simulate
from rlix.sim.alone import alone_jct_s, signature

# One node of 8: `big` takes 6 GPUs, `whole` needs all 8 (it waits for `big`), `short` needs 2
# and is short enough to end before `big` does, so EASY backfill runs it on the 2 idle GPUs.
SCENARIO = {
    "name": "backfill",
    "topology": {"num_nodes": 1, "gpus_per_node": 8},
    "trace": {"bundled": "math_small", "max_response_tokens": 4096},
    "pipelines": [
        {"id": "big", "home": 6, "steps": 6},
        {"id": "whole", "home": 8, "steps": 2, "arrival_s": 5},
        {"id": "short", "home": 2, "steps": 1, "prompts_per_step": 4, "arrival_s": 10},
    ],
}
COMMON = {"kind": "full_finetune", "model": "1.5b", "prompts_per_step": 16, "samples_per_prompt": 4,
          "clusters": {"actor_train": {"tp": 1, "gpus": "home"}, "actor_infer": {"tp": 1, "gpus": "pool"}}}


def _scenario() -> object:
    data = dict(SCENARIO, pipelines=[{**COMMON, **p} for p in SCENARIO["pipelines"]])
    return parse_scenario(yaml.safe_dump(data))


def _starts(policy: str) -> dict[str, float]:
    result = simulate(_scenario(), policy, plots=False, check_invariants=True)
    assert result.summary["finished"]
    allocations = result.tables["allocations"]
    return allocations.groupby("pipeline_id")["t_start"].min().to_dict()


def test_estimates_are_the_alone_times() -> None:
    scenario = _scenario()
    alone = alone_jct_s(scenario)
    result = simulate(scenario, "static-backfill", plots=False)
    for pid, spec in result.specs.items():
        assert spec.runtime_estimate_s == alone[pid] > 0
    assert simulate(scenario, "static", plots=False).specs["big"].runtime_estimate_s is None


def test_a_short_job_is_backfilled_and_the_head_is_not_delayed() -> None:
    static, backfill = _starts("static"), _starts("static-backfill")
    assert static["short"] >= static["whole"]  # FIFO: it waits behind the job ahead
    assert backfill["short"] < backfill["whole"]  # backfilled onto the idle GPUs
    assert backfill["whole"] <= static["whole"] + 1e-6


def test_jobs_of_one_template_share_an_alone_run() -> None:
    scenario = _scenario()
    data = scenario.model_dump(mode="json", exclude_none=True)
    twin = dict(data["pipelines"][2], id="short2", arrival_s=50.0)
    data["pipelines"].append(twin)
    from rlix.scenarios.load import validate_scenario

    scenario = validate_scenario(data)
    assert signature(scenario, "short") == signature(scenario, "short2")
    assert signature(scenario, "short", exact=True) != signature(scenario, "short2", exact=True)
    runs: dict[str, tuple[float, bool]] = {}
    alone = alone_jct_s(scenario, cache=runs)
    assert len(runs) == 3 and alone["short"] == alone["short2"]
