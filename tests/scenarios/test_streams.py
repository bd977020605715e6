"""Experiment streams (rlix.scenarios.streams): templates plus a seeded Poisson stream expand
into pipelines at load time, the same for a seed and differently for another; the loaded
scenario lists every job and loads back equal; bad streams are one line naming the field."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rlix.scenarios import ScenarioError, parse_scenario

TEMPLATE = """\
name: streamed
topology: {num_nodes: 2, gpus_per_node: 8}
trace: {bundled: math_small}
templates:
  grpo7b:
    kind: full_finetune
    algorithm: grpo
    model: 7b
    home: 8
    clusters: {actor_train: {tp: 1, gpus: home}, actor_infer: {tp: 2, gpus: pool}}
    prompts_per_step: 64
    samples_per_prompt: 8
    steps: 20
    max_staleness: 1
stream:
  seed: SEED
  duration_s: 14400
  arrivals:
    - {template: grpo7b, per_hour: 1.5}
    - {template: grpo7b, per_hour: 0.5, steps: [10, 40]}
"""


def _load(seed: int = 7, text: str = TEMPLATE) -> object:
    return parse_scenario(text.replace("SEED", str(seed)), file="s.yaml")


def test_the_documented_stream_expands() -> None:
    scenario = _load()
    ids = [p.id for p in scenario.pipelines]
    assert ids == [f"grpo7b-{n}" for n in range(len(ids))]  # one template: numbered in arrival order
    arrivals = [p.arrival_s for p in scenario.pipelines]
    assert arrivals == sorted(arrivals) and 0 <= arrivals[0] and arrivals[-1] < 14400
    assert all(p.home == 8 and p.clusters.actor_infer.gpus == "pool" for p in scenario.pipelines)
    assert {p.steps for p in scenario.pipelines} - {20} <= set(range(10, 41))
    assert 2 <= len(ids) <= 20  # 2 per hour over 4 hours: 8 expected
    text = scenario.to_yaml()
    assert "stream" not in yaml.safe_load(text) and "grpo7b" in yaml.safe_load(text)["templates"]
    again = parse_scenario(text)
    assert again == scenario


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000))
def test_a_seed_gives_one_expansion_and_another_seed_another(seed: int) -> None:
    first, second = _load(seed), _load(seed)
    assert first == second
    other = _load(seed + 1)
    assert [(p.arrival_s, p.steps) for p in other.pipelines] != [(p.arrival_s, p.steps) for p in first.pipelines]


def test_explicit_pipelines_come_first_and_an_entry_keeps_its_jobs() -> None:
    text = TEMPLATE.replace("stream:", """pipelines:
  - id: mine
    kind: full_finetune
    model: 7b
    home: 0-7
    clusters: {actor_train: {tp: 1, gpus: home}, actor_infer: {tp: 2, gpus: pool}}
    prompts_per_step: 8
    samples_per_prompt: 4
    steps: 2
    arrival_s: 99999
stream:""")
    scenario = _load(text=text)
    assert scenario.pipelines[0].id == "mine"
    # an entry's jobs come from its own generator: adding an entry does not move them
    one = _load(text=TEMPLATE.replace("    - {template: grpo7b, per_hour: 0.5, steps: [10, 40]}\n", ""))
    steady = {p.arrival_s for p in one.pipelines}
    assert steady <= {p.arrival_s for p in _load().pipelines}


@pytest.mark.parametrize(("edit", "where", "words"), [
    (("template: grpo7b, per_hour: 1.5", "template: nope, per_hour: 1.5"), "stream.arrivals[0].template", "unknown template"),
    (("per_hour: 1.5", "per_hour: 0"), "stream.arrivals[0].per_hour", "greater than 0"),
    (("duration_s: 14400", "duration_s: 1"), "stream.duration_s", "yields no job"),
    (("steps: [10, 40]", "steps: [40, 10]"), "stream.arrivals[1].steps", "a <= b"),
    (("    steps: 20\n", "    steps: 20\n    arrival_s: 5\n"), "templates.grpo7b.arrival_s", "has its own"),
    (("    home: 8\n", "    home: 99\n"), "templates.grpo7b.home", "larger than the pool"),
    (("    model: 7b\n", "    model: 9b\n"), "templates.grpo7b.model", "unknown model"),
])
def test_bad_streams_name_the_field(edit: tuple[str, str], where: str, words: str) -> None:
    with pytest.raises(ScenarioError) as info:
        _load(text=TEMPLATE.replace(*edit))
    message = str(info.value)
    assert message.startswith("s.yaml") and where in message and words in message, message
    assert "\n" not in message


@pytest.mark.parametrize("pipelines", ["", "pipelines: []\n"])
def test_templates_without_a_stream_or_a_log_say_what_makes_pipelines(pipelines: str) -> None:
    """A file of templates whose stream was left out (or whose job log was not passed) read as
    "pipelines: required field missing", as if the templates were not a way to give them."""
    text = TEMPLATE[: TEMPLATE.index("stream:")] + pipelines
    with pytest.raises(ScenarioError) as info:
        _load(text=text)
    message = str(info.value)
    assert message.startswith("s.yaml") and "pipelines" in message and "\n" not in message
    assert "templates make none by themselves" in message and "stream:" in message and "--jobs" in message
