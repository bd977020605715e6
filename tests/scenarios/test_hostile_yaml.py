"""Hostile scenario files: scalars their tag cannot hold, nested aliases, values too long to
show, absurd sizes and times. Each is one ScenarioError naming the line and field, quickly."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rlix.scenarios import ScenarioError, load_scenario, parse_scenario
from tests.scenarios.conftest import BASE

#: Nine lists of nine, each made of the one before: a few lines, 9**9 strings in all.
LAUGHS = ", ".join(["&a [x, x, x, x, x, x, x, x, x]"]
                   + [f"&{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)])


def _error(text: str) -> ScenarioError:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text, file="s.yaml")
    return caught.value


@pytest.mark.parametrize(
    ("scalar", "words"),
    [("2024-13-45", "cannot read timestamp"), ("!!bool maybe", "cannot read bool"), ("!!int abc", "cannot read int"),
     ("9" * 5000, "cannot read int")],
)
def test_a_scalar_its_tag_cannot_hold_is_named_at_its_line(scalar: str, words: str) -> None:
    error = _error(BASE.replace("name: base\n", f"name: base\nseed: {scalar}\n"))
    assert (error.line, words in error.problem) == (2, True), str(error)
    assert error.problem.startswith("YAML value error: "), str(error)  # well-formed: no syntax to fix


def test_nested_aliases_are_mapped_once_and_shown_short() -> None:
    start = time.monotonic()
    error = _error(BASE + f"laughs: [{LAUGHS}]\n")
    text = str(error)
    assert time.monotonic() - start < 10
    assert (error.path, error.line, len(text) < 400) == ("laughs", BASE.count("\n") + 1, True), text


def test_an_integer_too_long_to_print_is_described() -> None:
    error = _error(BASE.replace("name: base\n", f"name: base\nseed: 0x{'f' * 5000}\n"))
    assert "<an integer of 6021 digits>" in str(error) and "less than" in error.problem


@pytest.mark.parametrize("gpus", ["０-7", "²-7"])
def test_gpu_ids_are_ascii_digits(gpus: str) -> None:
    error = _error(BASE.replace("{tp: 2, gpus: 0-7}", f'{{tp: 2, gpus: "{gpus}"}}'))
    assert error.path == "pipelines[0].clusters.actor_infer.gpus" and "neither a GPU id" in error.problem


def test_a_range_larger_than_any_pool_is_refused_before_it_is_built() -> None:
    error = _error(BASE.replace("{tp: 2, gpus: 0-7}", "{tp: 2, gpus: 0-99999999999}"))
    assert error.path == "pipelines[0].clusters.actor_infer.gpus" and "more GPUs than a pool holds" in error.problem


def test_a_pool_larger_than_any_is_refused() -> None:
    error = _error(BASE.replace("num_nodes: 2", "num_nodes: 100000000"))
    assert (error.path, error.line) == ("topology", 2) and "at most" in error.problem


def test_an_arrival_past_the_clock_is_refused() -> None:
    error = _error(BASE.replace("arrival_s: 10", "arrival_s: 1e308"))
    assert error.path == "pipelines[0].arrival_s" and "less than or equal" in error.problem


def test_a_template_missing_a_field_shows_no_value() -> None:
    text = BASE + "templates: {t: {kind: full_finetune}}\nstream: {duration_s: 100, arrivals: [{template: t, per_hour: 9}]}\n"
    error = _error(text)
    assert str(error).endswith("templates.t.model: required field missing"), str(error)


def test_a_trace_path_that_is_a_folder_says_so(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(BASE.replace("trace: {bundled: math_small}", f"trace: {{path: {tmp_path}}}"), encoding="utf-8")
    with pytest.raises(ScenarioError, match="trace.path=.*: not a file"):
        load_scenario(path)


@pytest.mark.parametrize(("old", "new", "path", "words"), [
    ("    steps: 2\n    arrival_s: 10", "    steps: 10000000000000000000000\n    arrival_s: 10",
     "pipelines[0].steps", "less than or equal to 1000000"),
    ("      - {name: a0}", "      - {name: a0, steps: 2000000}", "pipelines[1].adapters[0].steps", "less than or equal"),
    ("    prompts_per_step: 4\n    samples_per_prompt: 2\n    steps: 2\n    arrival_s",
     "    prompts_per_step: 1000000000000\n    samples_per_prompt: 2\n    steps: 2\n    arrival_s",
     "pipelines[0].prompts_per_step", "less than or equal"),
    ("    prompts_per_step: 4\n    samples_per_prompt: 2\n    steps: 2\n    arrival_s",
     "    prompts_per_step: 65536\n    samples_per_prompt: 1024\n    steps: 2\n    arrival_s",
     "pipelines[0].samples_per_prompt", "67,108,864 trajectories a step"),
])
def test_a_run_too_long_or_a_step_too_big_is_refused_at_its_field(old: str, new: str, path: str, words: str) -> None:
    """Counts that would spin the simulator for ever or exhaust memory are named at their field."""
    assert old in BASE
    error = _error(BASE.replace(old, new, 1))
    assert error.path == path and words in error.problem, str(error)


def test_an_empty_executor_model_is_refused_at_its_field() -> None:
    """An empty path is the current directory: the executor would try to load it as a model."""
    error = _error(BASE + "executor: {model: ''}\n")
    assert error.path == "executor.model" and "at least 1 character" in error.problem, str(error)
