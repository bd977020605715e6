"""`rlix-sim run --help` and `compare --help` say what the commands write: where the default
folder is (the scenario's `name:`, not the SCENARIO argument, which may be a path) and which
plots compare writes."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from rlix.sim.cli import build_parser, main


def _help(name: str) -> str:
    parser = build_parser()
    (table,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return " ".join(table.choices[name].format_help().split())


def _renamed_tiny(folder: Path) -> Path:
    """tiny.yaml as `other.yaml`, its scenario named `renamed`."""
    text = (Path(__file__).parents[2] / "rlix" / "scenarios" / "data" / "tiny.yaml").read_text()
    path = folder / "other.yaml"
    path.write_text(re.sub(r"(?m)^name: tiny$", "name: renamed", text))
    return path


@pytest.mark.parametrize(("command", "leaf"), [("run", "rlix"), ("compare", "compare")])
def test_the_default_folder_is_named_by_the_scenarios_name(
    command: str, leaf: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = _renamed_tiny(tmp_path)
    monkeypatch.chdir(tmp_path)
    policy = ["--policy", "rlix"] if command == "run" else ["--policies", "rlix"]
    assert main([command, str(scenario), *policy, "--quiet", "--no-alone"]) == 0
    capsys.readouterr()
    assert (tmp_path / "runs" / "renamed" / leaf).is_dir()
    assert not (tmp_path / "runs" / "other.yaml").exists()
    text = _help(command)
    assert f"default runs/NAME/{'POLICY' if command == 'run' else 'compare'}, NAME the scenario's name:" in text
    assert "runs/SCENARIO" not in text


def test_compare_writes_the_plots_its_help_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cmp"
    assert main(["compare", "tiny", "--quiet", "--no-alone", "--policies", "static", "--out", str(out)]) == 0
    capsys.readouterr()
    written = {path.name for path in out.iterdir() if path.is_file()}
    named = set(re.findall(r"\b[\w-]+\.png\b", _help("compare")))
    assert written == named == {"compare.png", "jobs.png"}


def test_overwrite_help_says_it_replaces_only_a_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mine.txt").write_text("keep")
    assert main(["run", "tiny", "--quiet", "--no-alone", "--overwrite", "--out", str(tmp_path)]) == 2
    assert "not an rlix run folder" in capsys.readouterr().err
    assert "--overwrite replace --out if it holds a run folder (a folder of anything else is refused)" in _help("run")
