"""`rlix-sim demo`: `compare` on the bundled `tiny` scenario unless another is named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlix.sim.cli import build_parser, main


def test_demo_is_compare_on_tiny_by_default() -> None:
    demo = build_parser().parse_args(["demo"])
    compare = build_parser().parse_args(["compare", "tiny"])
    assert demo.run is compare.run
    assert {**vars(demo), "command": "compare"} == vars(compare)


def test_demo_runs_and_prints_the_comparison(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["demo", "--quiet", "--no-alone", "--policies", "rlix,static", "--json",
                   "--out", str(tmp_path)])
    assert status == 0
    figures = json.loads(capsys.readouterr().out)
    assert set(figures) == {"rlix", "static"}
    assert all(f["steps_per_hour"] > 0 for f in figures.values())
    assert (tmp_path / "rlix" / "summary.json").exists()


def test_run_refuses_a_non_empty_out_folder_before_simulating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run can take half an hour: a folder it could not write is refused before it starts
    (nothing simulated, nothing written); --overwrite replaces only a run folder."""
    import rlix.sim.api as api

    (tmp_path / "mine.txt").write_text("keep")

    def no_simulation(*args: object, **kwargs: object) -> None:
        raise AssertionError("simulated although the folder was refused")

    monkeypatch.setattr(api, "new_simulation", no_simulation)
    for overwrite in ([], ["--overwrite"]):  # not a run folder: never replaced
        assert main(["run", "tiny", "--quiet", "--out", str(tmp_path), *overwrite]) == 2
        err = capsys.readouterr().err
        assert "is not an rlix run folder" in err and "(--overwrite, overwrite=True in Python, replaces only folders rlix wrote)" in err
        assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]
    (tmp_path / "summary.json").write_text("{}")  # now it looks like a run: --overwrite is named
    assert main(["run", "tiny", "--quiet", "--out", str(tmp_path)]) == 2
    assert "run folder exists and is not empty; choose another or overwrite it (--overwrite" in capsys.readouterr().err


def test_the_help_says_what_tiny_is() -> None:
    from rlix.scenarios import load_scenario
    from rlix.sim.command_args import DEMO_HELP

    topology = load_scenario("tiny").topology_config
    assert topology.num_nodes == 1
    assert f"on one node of {topology.gpus_per_node} GPUs" in " ".join(DEMO_HELP.split())
