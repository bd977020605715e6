"""The public API: GPU sets, defaults filled in, policies, traces from files, documentation."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlix.policy import PolicyConfig, Topology
from rlix.scenarios import (
    Scenario,
    format_gpu_set,
    load_scenario,
    parse_gpu_set,
    parse_scenario,
    validate_scenario,
)
from rlix.scenarios.load import _fields_at
from rlix.scenarios.sections import PolicyTunables, Section
from tests.scenarios.conftest import BASE


@given(st.lists(st.integers(0, 300), unique=True, max_size=40))
def test_gpu_set_string_round_trips_any_order(gpus: list[int]) -> None:
    assert parse_gpu_set(format_gpu_set(gpus)) == tuple(gpus)


@pytest.mark.parametrize(
    ("written", "gpus"),
    [("0-3,8-11", (0, 1, 2, 3, 8, 9, 10, 11)), ("5", (5,)), (5, (5,)), ([3, 1], (3, 1)), (" 2 - 3 ", (2, 3)), ("", ())],
)
def test_gpu_set_spellings(written: object, gpus: tuple[int, ...]) -> None:
    assert parse_gpu_set(written) == gpus


@pytest.mark.parametrize("bad", ["a", "1,,2", "1-", "-1", "3-1", True, [1, "2"], 1.5, None])
def test_bad_gpu_sets(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_gpu_set(bad)


def test_defaults_are_filled_in() -> None:
    scenario = parse_scenario(BASE)
    p0, p1 = scenario.pipelines
    assert (p0.algorithm, p0.kl, p0.max_staleness, p0.weight) == ("grpo", False, 0, 1.0)
    assert p0.trace.bundled == "math_small" and p0.trace == p1.trace == scenario.trace
    a0, a1 = p1.adapters
    assert (a0.max_staleness, a0.steps, a0.trace) == (0, 2, p1.trace)
    assert a1.max_staleness == 1
    assert scenario.policy.name == "rlix" and scenario.policy_config() == PolicyConfig()
    assert scenario.topology() == Topology(2, 4)
    assert p1.staleness == {"a0": 0, "a1": 1}
    specs = scenario.pipeline_specs()
    assert specs["p1"].max_staleness == {"a0": 0, "a1": 1}
    assert specs["p1"].adapters == ("a0", "a1")


def test_pipeline_values_reach_adapters_and_adapter_values_win() -> None:
    text = BASE.replace("    adapters:\n", "    max_staleness: 2\n    trace: {bundled: agentic_small}\n    adapters:\n")
    text = text.replace("      - {name: a0}", "      - {name: a0, steps: 7, trace: {bundled: math_16k}}")
    _, p1 = parse_scenario(text).pipelines
    a0, a1 = p1.adapters
    assert (a0.max_staleness, a0.steps, a0.trace.bundled) == (2, 7, "math_16k")
    assert (a1.max_staleness, a1.steps, a1.trace.bundled) == (1, 2, "agentic_small")
    # The core is told each adapter's step count (rlix.policy.finish projects from it).
    p0_spec, p1_spec = parse_scenario(text).pipeline_specs().values()
    assert (p0_spec.num_steps, p1_spec.num_steps) == (2, {"a0": 7, "a1": 2})


def test_with_policy_and_config() -> None:
    scenario = parse_scenario(BASE)
    static = scenario.with_policy("static", {"min_rebalance_interval_s": 5})
    assert static.policy.name == "static"
    assert static.policy_config().min_rebalance_interval_s == 5
    assert static.pipelines == scenario.pipelines
    assert static.pipeline_specs() == scenario.pipeline_specs("static")
    assert scenario.policy.name == "rlix"  # unchanged


def test_equality_ignores_where_a_scenario_came_from(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(BASE)
    from_file = load_scenario(path)
    assert from_file.source.file == str(path)
    assert from_file == parse_scenario(BASE)
    assert from_file != parse_scenario(BASE.replace("steps: 2\n    arrival_s", "steps: 3\n    arrival_s"))


def test_scenario_is_frozen_and_pickles() -> None:
    scenario = load_scenario("tiny")
    with pytest.raises(pydantic.ValidationError):
        scenario.pipelines[0].steps = 9  # type: ignore[misc]
    again = pickle.loads(pickle.dumps(scenario))
    assert again == scenario and again.source.file == scenario.source.file


def test_trace_file_relative_to_the_scenario_with_column_map_and_cap(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "azure.csv").write_text("GeneratedTokens,ContextTokens\n10,5\n500,7\n90,3\n")
    text = BASE.replace(
        "trace: {bundled: math_small}",
        "trace: {path: logs/azure.csv, columns: {response_tokens: GeneratedTokens,"
        " prompt_tokens: ContextTokens}, max_response_tokens: 100}",
    )
    (tmp_path / "s.yaml").write_text(text)
    scenario = load_scenario(tmp_path / "s.yaml")
    trace = scenario.pipelines[0].trace
    assert trace.path == str(tmp_path / "logs" / "azure.csv")  # resolved, absolute
    frame = trace.load()
    assert list(frame["response_tokens"]) == [10, 100, 90]
    assert list(frame["capped"]) == [False, True, False]
    assert list(frame["prompt_tokens"]) == [5, 7, 3]
    # The resolved YAML holds the absolute path, so it loads from anywhere.
    assert parse_scenario(scenario.to_yaml(), base_dir="/") == scenario


def test_cap_keeps_a_trace_own_capped_flags() -> None:
    frame = load_scenario("agentic-4x32").pipelines[0].trace.load()
    assert frame["response_tokens"].max() == 32768
    assert frame["capped"].equals(frame["response_tokens"] >= 32768)


def test_exponent_floats_and_merge_keys() -> None:
    text = BASE + "executor: {actor_lr: 1e-5, lora_lr: 2E-4}\n"
    executor = parse_scenario(text).executor
    assert executor is not None and (executor.actor_lr, executor.lora_lr) == (1e-5, 2e-4)
    merged = BASE.replace("  - id: p0\n", "  - &p0\n    id: p0\n").replace(
        "  - id: p1\n    kind: multi_lora\n    model: 7b\n", "  - <<: *p0\n    id: p1\n    kind: multi_lora\n"
    )
    assert parse_scenario(merged).pipelines[1].model == "7b"


def test_validate_scenario_from_plain_data() -> None:
    data = parse_scenario(BASE).model_dump(mode="json")
    assert validate_scenario(data) == parse_scenario(BASE)


def test_policy_tunables_mirror_policy_config() -> None:
    fields = {f.name: f.default for f in dataclasses.fields(PolicyConfig)}
    assert PolicyTunables().model_dump() == fields


def test_every_field_is_documented() -> None:
    assert Scenario in Section.__subclasses__()
    undocumented = [
        f"{model.__name__}.{name}"
        for model in Section.__subclasses__()
        for name, info in model.model_fields.items()
        if not info.description
    ]
    assert undocumented == []


def test_unknown_field_hints_follow_lists_and_optionals() -> None:
    assert _fields_at(("pipelines", 3, "clusters", "critic")) == ["tp", "gpus"]
    assert _fields_at(("faults", "events", 0))[:2] == ["at_s", "kill"]  # type: ignore[index]
    assert _fields_at(("costs",)) is None
