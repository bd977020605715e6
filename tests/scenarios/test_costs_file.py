"""A cost file is read as scenario files are: a key given twice, text that is not UTF-8 and an
empty file are each one line naming the file (and the line where there is one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlix.scenarios import load_scenario
from rlix.scenarios.costs import read_costs_file
from rlix.scenarios.errors import ScenarioError
from rlix.sim.api import resolve_scenario


@pytest.mark.parametrize(
    ("content", "words"),
    [(b"costs: {load_s: 1}\ncosts: {load_s: 2}\n", "costs.yaml:2: costs: key given twice (first on line 1)"),
     ("costs: {load_s: 1}\n".encode("utf-16"), "cannot read the cost file"),
     (b"# nothing\n", "the file is empty (a cost file needs at least `costs:`)"),
     (b"costs: {load_s: 1}\nfits: 1" + b"9" * 5000 + b"\n", "costs.yaml:2: YAML value error: cannot read int")],
    ids=["key twice", "not UTF-8", "empty", "integer too long"],
)
def test_a_bad_cost_file_is_one_line(tmp_path: Path, content: bytes, words: str) -> None:
    path = tmp_path / "costs.yaml"
    path.write_bytes(content)
    with pytest.raises(ValueError) as caught:
        read_costs_file(path)
    assert words in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def _scenario_with_costs(tmp_path: Path, costs: str) -> Path:
    """tiny.yaml whose `costs:` is the path of a cost file holding `costs`."""
    (tmp_path / "c.yaml").write_text(costs)
    text = load_scenario("tiny").to_yaml()
    assert "costs: {}" in text
    path = tmp_path / "s.yaml"
    path.write_text(text.replace("costs: {}", "costs: c.yaml"))
    return path


def test_a_constant_read_from_a_cost_file_is_named_at_its_line_there(tmp_path: Path) -> None:
    """A constant checked after the file was read (by the simulator's cost model, through
    `field_error`) is at the cost file's line, not at the scenario's `costs:` line."""
    scenario = load_scenario(_scenario_with_costs(tmp_path, "kind: rlix-costs\ncosts:\n  load_s: 1\n  offload_s: 2\n"))
    error = scenario.field_error(("costs", "offload_s"), 2.0, "too slow")
    assert str(error) == f"{tmp_path / 'c.yaml'}:4: costs.offload_s=2.0: too slow"


def test_a_bad_cost_file_names_its_own_line(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(_scenario_with_costs(tmp_path, "costs:\n  load_s: 1\n  offload_s: fast\n"))
    assert f"the cost file {tmp_path / 'c.yaml'}:3: costs.offload_s: input should be a valid number" in str(caught.value)


def test_a_copy_with_a_cost_file_leaves_the_original_lines_alone(tmp_path: Path) -> None:
    """Giving a scenario a cost file (as `--costs` does) teaches the copy where its constants
    are written, not the scenario it was made from."""
    (tmp_path / "c.yaml").write_text("costs:\n  load_s: 1\n")
    original = load_scenario("tiny")
    copy = resolve_scenario(original, costs=tmp_path / "c.yaml")
    assert str(copy.field_error(("costs", "load_s"), 1.0, "x")).startswith(f"{tmp_path / 'c.yaml'}:2: ")
    assert str(tmp_path) not in str(original.field_error(("costs", "load_s"), 1.0, "x"))
