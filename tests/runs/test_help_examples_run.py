"""The examples in `rlix-sim replay --help` and `check --help` run as written, also after
`rlix-sim demo` (what `rlix-sim --help` says to start with) has made runs/tiny/compare: an
example writing `--out runs/tiny` was refused there, runs/tiny being no run folder."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import pytest

from rlix.sim.cli import build_parser, main


def _example(name: str) -> list[list[str]]:
    (table,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    epilog = " ".join((table.choices[name].epilog or "").split())
    assert epilog.startswith("example: "), epilog
    command = epilog.removeprefix("example: ").split(" (", 1)[0]
    steps = [shlex.split(part) for part in command.split("&&")]
    assert all(step[0] == "rlix-sim" for step in steps), steps
    return [step[1:] for step in steps]


@pytest.mark.parametrize("name", ["replay", "check"])
def test_the_example_runs_after_the_demo(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--quiet", "--no-alone", "--policies", "static"]) == 0
    for step in _example(name):
        assert main(step) == 0, (step, capsys.readouterr().err)
    assert (tmp_path / "runs" / "tiny" / "compare" / "static").is_dir()
