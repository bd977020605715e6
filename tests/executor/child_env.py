"""The environment of a child process a test starts (`rlix-exec`, a Ray session of its own)."""

from __future__ import annotations

import os
from pathlib import Path


def child_env(home: Path) -> dict[str, str]:
    """A child's environment with its own home (its own ~/.rlix) and Ray's auth left to Ray."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["HOME"] = str(home)
    env.setdefault("XDG_CACHE_HOME", str(Path.home() / ".cache"))  # the tiny model, built once
    return env
