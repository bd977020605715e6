"""Grid axes as `--grid` gives them: values split at the commas outside quotes and brackets,
a value that is not YAML or given twice is one error line. No Ray needed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlix.sim.cli import main
from rlix.studies import parse_grid
from rlix.traces.options import UsageError


def test_a_value_holding_commas_is_quoted_or_bracketed() -> None:
    grid = parse_grid(['pipelines.0.home="2-3,0-1",0-1', "pipelines.0.clusters.actor_infer={tp: 1, gpus: pool},{tp: 2, gpus: pool}"])
    assert grid.axes["pipelines.0.home"] == ["2-3,0-1", "0-1"]
    assert grid.axes["pipelines.0.clusters.actor_infer"] == [{"tp": 1, "gpus": "pool"}, {"tp": 2, "gpus": "pool"}]
    assert parse_grid(["policy.config.job_order=arrival,shortest"]).axes["policy.config.job_order"] == ["arrival", "shortest"]


@pytest.mark.parametrize(("item", "words"), [
    ("seed=[0", r"--grid seed=\[0: '\[0' is not a YAML value"),
    ("seed=0,0", r"--grid seed=0,0: the value '0' is given twice"),
    ("policy=rlix,static,rlix", "'rlix' is given twice"),
    # a blank reads as YAML null: a stray comma must not add a point with the field unset
    ("pipelines.*.runtime_estimate_s=100,", r"an empty value .*write null"),
    ("seed=1,,2", "an empty value"),
    ("seed= ", "an empty value"),
])
def test_a_bad_value_is_one_line(item: str, words: str) -> None:
    with pytest.raises(UsageError, match=words):
        parse_grid([item])


def test_a_sweep_file_axis_with_a_value_twice_is_refused() -> None:
    with pytest.raises(UsageError, match=r"grid.seed: the value '1' is given twice"):
        parse_grid([], {"seed": [1, 2, 1]})


def test_one_number_written_two_ways_is_given_twice() -> None:
    """1 and 1.0 set a field alike: the same point would run twice under two labels."""
    with pytest.raises(UsageError, match=r"the value '1.0' is given twice"):
        parse_grid(["costs.load_s=1,1.0"])
    assert len(parse_grid(["costs.load_s=1,1.5,true,.nan,.inf"]).axes["costs.load_s"]) == 5


def test_an_axis_given_twice_is_refused_not_replaced() -> None:
    """A second --grid of the same key replaced the first, and its values never ran."""
    with pytest.raises(UsageError, match=r"--grid seed=2,3: the axis seed is given already \(in an earlier --grid\)"):
        parse_grid(["seed=0,1", "seed=2,3"])
    with pytest.raises(UsageError, match="the axis seed is given already"):
        parse_grid(["seed=0,1", " seed =2"])
    with pytest.raises(UsageError, match=r"the axis seed is given already \(in the sweep file's grid:\)"):
        parse_grid(["seed=2"], {"seed": [0, 1]})


@pytest.mark.parametrize("items", [
    ["policy=rlix,static", "policy.name=gap-ratio"],
    ["topology={num_nodes: 1, gpus_per_node: 4, gpu: h100}", "topology.num_nodes=1,2"],
    ["pipelines.*.steps=1,2", "pipelines.0.steps=3"],
    ["pipelines.0.steps=3", "pipelines.*.steps=1,2"],
])
def test_two_axes_setting_one_field_are_refused(items: list[str]) -> None:
    """The later axis overwrote the earlier one's value: `policy=static` with `policy.name=rlix`
    ran rlix in the row that says static."""
    first, second = (item.partition("=")[0] for item in items)
    with pytest.raises(UsageError, match=rf"the axes {re.escape(first)} and {re.escape(second)} set the same field"):
        parse_grid(items)


def test_axes_of_different_fields_are_kept() -> None:
    grid = parse_grid(["policy=rlix", "policy.config.job_order=arrival", "pipelines.0.steps=1",
                       "pipelines.1.steps=2", "pipelines.*.max_staleness=0"])
    assert grid.num_points == 1 and len(grid.axes) == 5


def test_a_grid_of_too_many_points_is_refused_before_any_is_built(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A million points took minutes and gigabytes of building with nothing shown."""
    hundred = ",".join(str(i) for i in range(1, 101))  # each a valid value of each axis
    assert parse_grid([f"seed={hundred}", f"pipelines.*.steps={hundred}"]).num_points == 10_000
    out = tmp_path / "sweep"
    args = ["sweep", "tiny", "--grid", f"seed={hundred}", "--grid", f"pipelines.*.steps={hundred}",
            "--grid", f"costs.load_s={hundred}", "--out", str(out), "--quiet"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "the grid makes 1,000,000 points (100 x 100 x 100), more than a sweep runs (10,000)" in err
    assert not out.exists()


def test_the_cli_names_the_grid_option_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", "tiny", "--grid", "seed=[0", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("rlix-sim: error: --grid seed=[0: ")
    assert not out.exists()


def test_a_sweep_files_scenario_path_is_relative_to_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlix.scenarios import load_scenario
    from rlix.studies.cli import read_sweep_file

    (tmp_path / "studies" / "scenarios").mkdir(parents=True)
    (tmp_path / "studies" / "scenarios" / "mine.yaml").write_text("name: mine\n")
    (tmp_path / "studies" / "sweep.yaml").write_text("scenario: scenarios/mine.yaml\ngrid: {seed: [0, 1]}\n")
    (tmp_path / "studies" / "named.yaml").write_text("scenario: tiny\ngrid: {seed: [0, 1]}\n")
    monkeypatch.chdir(tmp_path)  # not the sweep file's folder
    spec = read_sweep_file("studies/sweep.yaml")
    assert Path(spec["scenario"]).resolve() == (tmp_path / "studies" / "scenarios" / "mine.yaml").resolve()
    assert read_sweep_file("studies/named.yaml")["scenario"] == "tiny"  # a bundled name stays one
    assert load_scenario(read_sweep_file("studies/named.yaml")["scenario"]).name == "tiny"


@pytest.mark.parametrize("scenario", ["[tiny]", "5", "{name: tiny}"])
def test_a_sweep_files_scenario_that_is_no_name_is_one_line(
    scenario: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It reached load_scenario and failed there with a TypeError traceback."""
    (tmp_path / "sweep.yaml").write_text(f"scenario: {scenario}\ngrid: {{seed: [0]}}\n")
    out = tmp_path / "sweep"
    assert main(["sweep", "--file", str(tmp_path / "sweep.yaml"), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "sweep.yaml: scenario: must be a bundled scenario's name or a YAML path" in err
    assert not out.exists()


def test_a_grid_sets_a_field_the_scenario_leaves_unset() -> None:
    """tiny gives no runtime estimate and no executor section: the models define both."""
    from rlix.scenarios import load_scenario

    base = load_scenario("tiny")
    assert all(p.runtime_estimate_s is None for p in base.pipelines) and base.executor is None
    points = parse_grid(["pipelines.*.runtime_estimate_s=100,200", "executor.num_cpus=2"]).points(base)
    assert [[p.runtime_estimate_s for p in point.scenario.pipelines] for point in points] == [[100, 100], [200, 200]]
    assert {point.scenario.executor.num_cpus for point in points if point.scenario.executor} == {2}
    for item, words in (("pipelines.*.runtime_estimat_s=1", "'runtime_estimat_s' names no field"),
                        ("topology.gpus=1", "'gpus' names no field"), ("seed.x=1", "'x' names no field")):
        with pytest.raises(UsageError, match=words):
            parse_grid([item]).points(base)


def test_a_bad_axis_of_a_sweep_file_is_not_blamed_on_the_grid_option() -> None:
    """The axis may come from a sweep file's grid: (no --grid given at all): the message names
    the axis, not the option."""
    from rlix.scenarios import load_scenario

    with pytest.raises(UsageError, match=r"^grid axis topology\.gpus: 'gpus' names no field"):
        parse_grid([], {"topology.gpus": [1]}).points(load_scenario("tiny"))
