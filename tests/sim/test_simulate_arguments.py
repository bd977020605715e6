"""`rlix.sim.simulate` given bad arguments, as a notebook passes them: one error naming the
argument or field and what is wrong, raised before the run, and nothing left in `out`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlix.runs.errors import RunError
from rlix.scenarios import load_scenario
from rlix.scenarios.errors import ScenarioError
from rlix.sim import simulate


def _changed(**update: Any) -> Any:
    return load_scenario("tiny").model_copy(update=update)


def _pipelines_changed(**update: Any) -> Any:
    scenario = load_scenario("tiny")
    first, *rest = scenario.pipelines
    return scenario.model_copy(update={"pipelines": [first.model_copy(update=update), *rest]})


@pytest.mark.parametrize(("scenario", "message"), [
    # numpy's "expected non-negative integer" from its seeding
    (lambda: _changed(seed=-1), "seed=-1: input should be greater than or equal to 0"),
    # a KeyError from the policy table
    (lambda: _changed(policy=load_scenario("tiny").policy.model_copy(update={"name": "rlx"})),
     "policy.name='rlx': unknown policy"),
    # ran to the end, the limit ignored
    (lambda: _changed(max_time_s=float("nan")), "max_time_s=nan: input should be a finite number"),
    # SimPy's "Negative delay -1.0"
    (lambda: _pipelines_changed(arrival_s=-1.0), "pipelines[0].arrival_s=-1.0: input should be greater"),
    # ran, with one pipeline's record over the other's
    (lambda: load_scenario("tiny").model_copy(update={"pipelines": [load_scenario("tiny").pipelines[0]] * 2}),
     "pipelines[1].id='ft': duplicate pipeline id"),
], ids=["seed", "policy", "max_time_s", "arrival_s", "duplicate-id"])
def test_a_scenario_changed_in_memory_is_checked_as_a_loaded_one(
        scenario: Any, message: str, tmp_path: Path) -> None:
    """model_copy(update=...) skips pydantic's validation: the run must not take the values
    on trust."""
    with pytest.raises(ScenarioError) as caught:
        simulate(scenario(), out=tmp_path / "run")
    assert message in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_a_scenario_object_unchanged_runs_as_its_name_does() -> None:
    by_object = simulate(load_scenario("tiny"), plots=False).summary
    assert by_object == simulate("tiny", plots=False).summary


@pytest.mark.parametrize(("case", "message"), [
    ("exists", "run folder exists and is not empty"),
    ("file", "exists and is not a folder"),
    ("format", "tables are written as parquet or csv, not 'xlsx'"),
])
def test_an_out_the_run_folder_cannot_be_written_to_is_refused_before_the_run(
        case: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not after a run that may take hours, whose record is then lost."""
    import rlix.sim.api

    out = tmp_path / "run"
    if case == "exists":
        simulate("tiny", out=out, plots=False)
    elif case == "file":
        out.write_text("notes")

    def no_run(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the run started")

    monkeypatch.setattr(rlix.sim.api, "new_simulation", no_run)
    with pytest.raises(RunError, match=message):
        simulate("tiny", out=out, plots=False, table_format="xlsx" if case == "format" else "parquet")


@pytest.mark.parametrize(("tables", "message"), [
    (["stepz"], "tables=['stepz']: unknown table(s) stepz (known: allocations, steps,"),
    ([], "tables=[]: no table named (known: allocations, steps,"),
    ("steps", "tables= is a list of table names (tables=['steps', 'jobs']), not 'steps'"),
    ([3], "tables=[3]: table names are strings (known: allocations, steps,"),
], ids=["unknown", "empty", "string", "not-a-name"])
def test_bad_tables_are_one_error_naming_tables_and_leave_nothing_beside_out(
        tables: Any, message: str, tmp_path: Path) -> None:
    """They were checked after the hidden folder the run streams into was made beside `out`,
    and that folder stayed; a string was taken letter by letter."""
    with pytest.raises(RunError) as caught:
        simulate("tiny", out=tmp_path / "run", tables=tables)
    assert str(caught.value).startswith(message)
    assert list(tmp_path.iterdir()) == []


def test_columns_without_a_trace_are_refused() -> None:
    """They map the columns of the trace= file; without one they were ignored, and the run
    used the scenario's own trace as if the mapping had been applied."""
    from rlix.sim.api import resolve_scenario

    with pytest.raises(ValueError, match="columns= maps the columns of the trace= file: give trace= too"):
        simulate("tiny", columns={"prompt_len": "input_tokens"})
    with pytest.raises(ValueError, match="jobs_columns= maps the columns of the jobs= file: give jobs= too"):
        resolve_scenario("tiny", jobs_columns={"arrival_s": "submit"})


@pytest.mark.parametrize("tables", [None, ["steps"]], ids=["kept", "streamed"])
def test_the_summary_returned_has_the_keys_of_the_summary_written(tables: Any, tmp_path: Path) -> None:
    """A run kept in memory returned no stop_reason or faults, which its summary.json and a
    streamed run's returned summary have."""
    import json

    result = simulate("tiny", out=tmp_path / "run", plots=False, tables=tables)
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert json.loads(json.dumps(result.summary)) == written


@pytest.mark.parametrize(("arguments", "message"), [
    ({"scenario": 3}, "scenario= is a bundled scenario's name, a YAML file's path or a Scenario, not int"),
    ({"scenario": None}, "scenario= is a bundled scenario's name, a YAML file's path or a Scenario, not NoneType"),
    ({"trace": "t.csv", "columns": ["prompt_tokens=input_len"]},
     "columns= is a dict of rlix's column names to the file's ({'prompt_tokens': 'input_len'}), not ['prompt"),
    ({"progress": 3}, "progress= is a function of the simulated seconds so far, not 3"),
], ids=["scenario-int", "scenario-none", "columns-list", "progress"])
def test_an_argument_of_the_wrong_type_is_named(arguments: dict[str, Any], message: str) -> None:
    """os.fspath's 'expected str, bytes or os.PathLike object', dict()'s 'dictionary update
    sequence element #0' and 'int object is not callable' from inside the run named none."""
    arguments = {"scenario": "tiny", **arguments}
    with pytest.raises(TypeError) as caught:
        simulate(arguments.pop("scenario"), **arguments)
    assert str(caught.value).startswith(message)


def test_a_numpy_integer_seed_is_a_seed() -> None:
    """`for seed in np.arange(3)` gave 'seed=np.int64(1): input should be a valid integer'."""
    import numpy as np

    assert simulate("tiny", seed=np.int64(1)).summary == simulate("tiny", seed=1).summary
    with pytest.raises(ScenarioError, match="seed=True: input should be a valid integer"):
        simulate("tiny", seed=True)


def test_a_bundled_traces_name_is_a_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """trace= takes a bundled trace's name, as `rlix-sim trace inspect` does (it was 'no such
    trace file'); a file of that name in the working folder is still the file."""
    from rlix.sim.api import resolve_scenario

    scenario = resolve_scenario("agentic-4x32", trace="math_16k")
    assert {p.trace.bundled for p in scenario.pipelines} == {"math_16k"}
    assert scenario.trace is not None and scenario.trace.bundled == "math_16k"
    with pytest.raises(ValueError, match="the bundled trace 'math_16k' has rlix's own"):
        resolve_scenario("tiny", trace="math_16k", columns={"response_tokens": "x"})
    monkeypatch.chdir(tmp_path)
    (tmp_path / "math_16k").write_text("response_tokens\n7\n")
    assert resolve_scenario("tiny", trace="math_16k").trace.path == str(tmp_path / "math_16k")


@pytest.mark.parametrize(("arguments", "message"), [
    ({"seed": -1}, "the seed= argument: seed=-1: input should be greater than or equal to 0"),
    ({"policy": "rlx"}, "the policy= argument: policy.name='rlx': unknown policy"),
    ({"max_time_s": -5}, "the max_time_s= argument: max_time_s=-5: input should be greater than 0"),
])
def test_a_bad_override_is_named_as_the_argument(arguments: dict[str, Any], message: str) -> None:
    """Not at the scenario file's line of the field it overrides (tiny.yaml:8: seed=-1), which
    holds another value."""
    from rlix.sim.api import resolve_scenario

    with pytest.raises(ScenarioError) as caught:
        resolve_scenario("tiny", **arguments)
    assert str(caught.value).startswith(message) and "tiny.yaml" not in str(caught.value)
