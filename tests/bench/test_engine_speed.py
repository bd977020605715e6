"""bench/engine_speed.py: its figures as text, or with --json as one JSON line."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.bench.bench_module import BENCH


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCH / "engine_speed.py"), "--trajectories", "2000", *args],
                          capture_output=True, text=True, check=True)


def test_json_is_one_line_of_the_figures_and_text_is_the_default() -> None:
    lines = run("--json").stdout.splitlines()
    assert len(lines) == 1
    figures = json.loads(lines[0])
    assert figures["bench"] == "engine_speed" and figures["rollouts"] > 0
    assert figures["rollouts_per_cpu_s"] > 0 and figures["rollouts_per_wall_s"] > 0
    text = run().stdout
    assert "rollouts per CPU-s" in text and "{" not in text
