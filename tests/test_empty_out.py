"""An empty --out is refused when the command line is parsed (it used to mean the default
folder, silently): rlix-sim run and compare, and rlix-exec run."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("command", [["rlix.sim.cli", "run", "tiny"], ["rlix.sim.cli", "compare", "tiny"],
                                     ["rlix.executor.cli", "run", "cpu-demo"]])
def test_an_empty_out_is_one_line(command: list[str], tmp_path: object) -> None:
    done = subprocess.run([sys.executable, "-m", *command, "--out", ""], capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path))
    assert done.returncode == 2 and "argument --out: an empty path" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
