"""Child processes a test starts: their environment (`rlix-exec`, a Ray session of its own), and
a fresh interpreter for what a script prints when nothing the test session imported counts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def child_env(home: Path) -> dict[str, str]:
    """A child's environment with its own home (its own ~/.rlix) and Ray's auth left to Ray."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["HOME"] = str(home)
    env.setdefault("XDG_CACHE_HOME", str(Path.home() / ".cache"))  # the tiny model, built once
    return env


def printed_by_a_fresh_interpreter(script: str) -> list[str]:
    """The words `script` prints, run by a new Python (e.g. which modules it has imported by
    then: a module the test session imported does not count)."""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    return done.stdout.split()
