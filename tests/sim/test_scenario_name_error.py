"""A scenario name that is neither bundled nor a file (a newcomer's first typo) is one line that
says so and lists the bundled names, without the "<scenario>:" placeholder that stands for a
file where there is none."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlix.scenarios import bundled_scenarios
from rlix.sim.cli import main


@pytest.mark.parametrize("command", ["run", "compare", "demo"])
def test_an_unknown_scenario_name_is_one_plain_line(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main([command, "agentic", "--quiet", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"rlix-sim: error: no bundled scenario 'agentic' and no such file "
                            f"(bundled: {', '.join(bundled_scenarios())})\n")
    assert not out.exists()
