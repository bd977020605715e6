"""`rlix-sim demo` runs the bundled scenario under every policy, invariants checked."""

from __future__ import annotations

import re

import pytest

from rlix.sim.cli import main


def test_demo_runs_and_sharing_beats_sequential(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--steps", "2", "--show", "5"]) == 0
    out = capsys.readouterr().out
    assert "under 'rlix'" in out
    makespans = {m[0]: float(m[1]) for m in re.findall(r"^(\S+)\s+([\d.]+)\s+[\d.]+\s+\d+$", out, re.M)}
    assert {"rlix", "sequential", "static"} <= set(makespans)
    assert makespans["rlix"] < makespans["sequential"]


def test_demo_help_teaches(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["demo", "--help"])
    assert info.value.code == 0
    assert "--load-s" in capsys.readouterr().out
