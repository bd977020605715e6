"""A multi-LoRA pipeline publishes an adapter's version while it still holds actor_train, and
goes on to the next adapter whose batch is already done in one atomic event: its home's GPUs
are never free for the instant between two adapters' training (lent to other jobs' rollout
then, they would be taken back before their weights had loaded)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rlix.scenarios import load_scenario
from rlix.sim import simulate


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The multi-LoRA pipeline's events in the tiny scenario's record (one run for the module).
    Seed 2: twice there an adapter's batch is done when the other adapter's training ends
    (whether it is depends on the trace's draws and the policy's timing; seed 0 has none)."""
    out = tmp_path_factory.mktemp("lora") / "run"
    simulate(load_scenario("tiny").model_copy(update={"seed": 2}), plots=False, out=out)
    events = []
    for line in (out / "events.jsonl").read_text().splitlines()[1:]:
        record = json.loads(line)
        event = record.get("event")
        if event is not None and event.get("pipeline_id") == "lora":
            events.append(event)
    return events


def _releases_actor_train(event: dict[str, Any]) -> bool:
    return (event["type"] == "ClusterReleased" and event["cluster"] == "actor_train") or (
        event["type"] == "ClusterReleasedAndRequested" and event["released"] == "actor_train"
    )


def test_each_adapter_version_is_published_before_actor_train_is_released(events: list[dict[str, Any]]) -> None:
    trainings = 0
    for i, event in enumerate(events):
        # The actor-training stage: the request at priority 1 (atomic after old log-probs).
        if event["type"] == "ClusterReleasedAndRequested" and event["priority"] == 1:
            trainings += 1
            after = [e for e in events[i + 1:] if e["type"] == "TrainStepFinished" or _releases_actor_train(e)]
            assert after and after[0]["type"] == "TrainStepFinished", (event, after[:1])
    assert trainings == 6  # two adapters, three steps each


def test_a_batch_already_done_is_trained_without_giving_the_gpus_back(events: list[dict[str, Any]]) -> None:
    back_to_back = [
        e for e in events
        if e["type"] == "ClusterReleasedAndRequested" and e["released"] == "actor_train"
        and e["requested"] == "actor_train" and e["priority"] == 3
    ]
    assert back_to_back, "no adapter went straight on to the next one's old log-probs"
    old_log_probs = [
        e for e in events
        if e["type"] in ("ClusterRequested", "ClusterReleasedAndRequested") and e["priority"] == 3
        and e.get("cluster", e.get("requested")) == "actor_train"
    ]
    assert len(old_log_probs) == 6  # each adapter step asks once, by either event
