"""rlix-sim run's printed tables, as a newcomer reads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlix.sim.cli import main


def test_the_run_table_names_the_staleness_bound_and_gives_it_per_adapter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pipelines' table heads its staleness column max_staleness (it read k) and gives a
    multi-LoRA pipeline's bounds as adapter=bound, not a Python dict."""
    assert main(["run", "cpu-demo", "--no-alone", "--out", str(tmp_path / "run")]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("pipeline "))
    assert "max_staleness" in header.split()
    lora = next(line for line in lines if line.startswith("lora "))
    assert "a0=0 a1=1" in lora and "{" not in lora
