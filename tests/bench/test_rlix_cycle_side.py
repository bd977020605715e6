"""bench/rlix_cycle_side.py run by hand (it is rlix_differential.py's helper): one line saying
what it is, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.bench.bench_module import BENCH


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCH / "rlix_cycle_side.py"), *args], capture_output=True,
                          text=True, check=False, stdin=subprocess.DEVNULL)


def test_help_says_it_is_rlix_differentials_helper() -> None:
    done = run("--help")
    assert done.returncode == 0 and done.stderr == ""
    assert len(done.stdout.strip().splitlines()) == 1
    assert "internal helper" in done.stdout and "rlix_differential.py" in done.stdout


def test_run_by_hand_it_refuses_in_one_line(tmp_path: Path) -> None:
    for args, reason in (((), "one argument"), (("a", "b"), "one argument"),
                         ((str(tmp_path),), "is not an RLix checkout")):
        done = run(*args)
        assert done.returncode == 2 and done.stdout == "", args
        (line,) = done.stderr.strip().splitlines()
        assert "rlix_differential.py" in line and reason in line, args
