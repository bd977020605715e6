"""`rlix-sim sweep` without Ray (an install with only the `sim` extra): one line naming the
extra that brings it, exit 2, and nothing written. Kept apart from test_sweep.py, which is
skipped where Ray is missing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rlix.scenarios import load_scenario
from rlix.sim.cli import main
from rlix.studies import parse_grid, run_sweep
from rlix.traces.options import UsageError


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules: `import ray` fails and importlib.util.find_spec("ray") is None.
    monkeypatch.setitem(sys.modules, "ray", None)


def test_the_command_says_which_extra_brings_ray_and_writes_nothing(
    no_ray: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sweep"
    status = main(["sweep", "tiny", "--grid", "seed=0,1", "--out", str(out), "--quiet", "--no-plots"])
    err = capsys.readouterr().err
    assert status == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("rlix-sim: error: ")
    assert "Ray" in err and "pip install -e '.[exec]'" in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_run_sweep_refuses_before_making_its_folder(no_ray: None, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    with pytest.raises(UsageError, match=r"exec extra"):
        run_sweep(load_scenario("tiny"), parse_grid(["seed=0,1"]), out)
    assert not out.exists()


@pytest.mark.parametrize(("option", "value"), [("--out", ""), ("--out", " "), ("--file", ""), ("--address", "")])
def test_an_empty_path_or_address_is_refused_as_the_other_commands_refuse_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    """An empty --out swept into the current folder (results.parquet, sweep.json, plots/ among
    whatever was there), an empty --file read as no file ("name a SCENARIO"), an empty
    --address was tried as a cluster's."""
    monkeypatch.chdir(tmp_path)
    argv = ["sweep", "tiny", "--grid", "seed=0", "--out", "sweep", "--quiet", option, value]
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlix-sim sweep: error: argument {option}: an empty ") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_file_that_cannot_be_read_is_named_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for path, why in ((tmp_path / "nope.yaml", "No such file or directory"), (tmp_path, "Is a directory")):
        assert main(["sweep", "--file", str(path), "--out", str(tmp_path / "sweep"), "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"rlix-sim: error: cannot read the sweep file {path}: {why}"
