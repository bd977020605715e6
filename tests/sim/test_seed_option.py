"""A --seed the scenario schema refuses (2^64 or more) is named as --seed, the option the user
typed, in one line, with nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlix.sim.cli import main


@pytest.mark.parametrize("command", ["run", "compare", "demo"])
def test_a_seed_too_large_names_the_option(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = str(2**64)
    scenario = [] if command == "demo" else ["tiny"]
    out = tmp_path / "out"
    assert main([command, *scenario, "--seed", seed, "--quiet", "--no-alone", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"rlix-sim: error: --seed: {seed}: input should be less than {seed}\n"
    assert not out.exists()
