"""`rlix-sim check`'s line on a run that passes names what held, not only the design's
invariant numbers, which a user who never read the design cannot look up."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runs.run_cli import run_cli_main


def test_the_passing_line_says_what_each_invariant_is(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert run_cli_main("check", str(run_dir)) == 0
    line = capsys.readouterr().out.strip()
    assert "one holder per GPU and exact mappings (1, 2) hold over" in line, line
    assert "staleness bounds and no lost trajectory (7, 8) hold over 6 rollout attempts" in line, line
    assert line.endswith("its tables agree with events.jsonl")
