"""A run cut short by `--duration-s` or `--days` says that option set its limit, not the
scenario's max_time_s (which the option replaced)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlix.sim.cli import main


@pytest.mark.parametrize(("option", "value"), [("--duration-s", "5"), ("--days", "0.0001")])
def test_a_run_cut_by_an_option_names_it(option: str, value: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "tiny", option, value, "--no-alone", "--quiet", "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert f"({option} {value} was reached)" in out, out
    assert "the scenario's max_time_s" not in out


def test_a_run_cut_by_the_scenario_names_max_time_s(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "short.yaml"
    text = (Path(__file__).parents[2] / "rlix" / "scenarios" / "data" / "tiny.yaml").read_text()
    assert "max_time_s" not in text
    scenario.write_text(text + "\nmax_time_s: 5\n")
    assert main(["run", str(scenario), "--no-alone", "--quiet", "--out", str(tmp_path / "r")]) == 0
    assert "(the scenario's max_time_s was reached)" in capsys.readouterr().out
