"""The simulator charges the executor's checkpoints: the same steps (the shared program), each
the time to write the trained weights and optimizer state to storage, in the steps table."""

from __future__ import annotations

import pytest

from rlix.scenarios import load_scenario
from rlix.scenarios.load import validate_scenario
from rlix.scenarios.models import MODELS
from rlix.sim import simulate
from rlix.sim.costs import CostModel


def _tiny(checkpoint_every: int) -> object:
    data = load_scenario("tiny").model_dump(mode="json")
    data["executor"] = {"checkpoint_every": checkpoint_every}
    return validate_scenario(data, None)


def test_checkpoint_steps_and_their_time() -> None:
    plain = simulate(load_scenario("tiny"), plots=False)
    every2 = simulate(_tiny(2), plots=False)
    steps = every2.tables["steps"]
    checkpointed = steps[steps.checkpoint_s > 0]
    assert ((checkpointed.step + 1) % 2 == 0).all() and len(checkpointed) == int(((steps.step + 1) % 2 == 0).sum())
    assert (plain.tables["steps"].checkpoint_s == 0).all()
    scenario = load_scenario("tiny")
    checked = 0
    for row in checkpointed.itertuples():
        pipeline = next(p for p in scenario.pipelines if p.id == row.pipeline_id)
        costs = CostModel.for_model(pipeline.model)
        params = MODELS[pipeline.model].num_params if pipeline.kind == "full_finetune" else None
        if params is not None:  # by hand: 14 bytes a parameter (BF16 weights, FP32 Adam) at storage speed
            critic = 2 if pipeline.algorithm == "ppo" else 1
            assert row.checkpoint_s == pytest.approx(14 * params * critic / costs.storage_bytes_per_s, rel=1e-9)
            checked += 1
    assert checked > 0
    assert every2.summary["makespan_s"] > plain.summary["makespan_s"]
