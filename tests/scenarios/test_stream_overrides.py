"""A stream entry's overrides (rlix.scenarios.streams) are checked before any draw: an unknown
key, a per-job field or a value a pipeline refuses is named at `stream.arrivals[i].KEY` and its
line, for every seed alike (a range [a, b] at both ends), never at an expanded pipeline."""

from __future__ import annotations

import pytest

from rlix.scenarios import ScenarioError, parse_scenario
from tests.scenarios.test_streams import TEMPLATE

#: The documented stream's second entry, the one with overrides, on line 21.
ENTRY = "    - {template: grpo7b, per_hour: 0.5, steps: [10, 40]}"
LINE = TEMPLATE.splitlines().index(ENTRY) + 1


def _load(entry: str, seed: int = 7) -> object:
    return parse_scenario(TEMPLATE.replace(ENTRY, entry).replace("SEED", str(seed)), file="s.yaml")


@pytest.mark.parametrize(("entry", "where", "words"), [
    ("    - {template: grpo7b, per_hour: 0.5, nosuch: 3}", "stream.arrivals[1].nosuch=3", "unknown field"),
    ("    - {template: grpo7b, per_hour: 0.5, stepz: 3}", "stream.arrivals[1].stepz=3", "did you mean 'steps'?"),
    ("    - {template: grpo7b, per_hour: 0.5, arrival_s: 5}", "stream.arrivals[1].arrival_s=5", "has its own"),
    ("    - {template: grpo7b, per_hour: 0.5, id: x}", "stream.arrivals[1].id='x'", "has its own"),
    ("    - {template: grpo7b, per_hour: 0.5, steps: [0, 1]}", "stream.arrivals[1].steps=[0, 1]",
     "its low end 0: input should be greater than 0"),
    ("    - {template: grpo7b, per_hour: 0.5, home: [8, 99]}", "stream.arrivals[1].home=[8, 99]",
     "its high end 99: is larger than the pool"),
    ("    - {template: grpo7b, per_hour: 0.5, steps: -2}", "stream.arrivals[1].steps=-2", "greater than 0"),
])
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_a_bad_override_is_named_at_its_entry_whatever_the_draw(entry: str, where: str, words: str, seed: int) -> None:
    with pytest.raises(ScenarioError) as info:
        _load(entry, seed)
    message = str(info.value)
    assert message.startswith(f"s.yaml:{LINE}: {where}: ") and words in message, message
    assert "pipelines" not in message and "\n" not in message


def test_an_entry_whose_jobs_would_take_a_pipelines_id_is_named() -> None:
    text = TEMPLATE.replace("SEED", "7").replace("stream:", """pipelines:
  - id: grpo7b-0
    kind: full_finetune
    model: 7b
    home: 0-7
    clusters: {actor_train: {tp: 1, gpus: home}, actor_infer: {tp: 2, gpus: pool}}
    prompts_per_step: 8
    samples_per_prompt: 4
    steps: 2
stream:""")
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, file="s.yaml")
    message = str(info.value)
    assert ".template='grpo7b': its jobs are named grpo7b-N, and 'grpo7b-0' is the id of pipelines[0]" in message
    assert message.startswith("s.yaml:") and "stream.arrivals[" in message, message


def test_a_good_range_still_draws_within_it() -> None:
    scenario = _load("    - {template: grpo7b, per_hour: 5, steps: [1, 2]}")
    assert {p.steps for p in scenario.pipelines} <= {1, 2, 20}  # type: ignore[attr-defined]
