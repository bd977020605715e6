"""A policy or scenario named twice in a comma-separated list is refused in one line, not run
twice (`rlix-sim compare --policies rlix,rlix` ran rlix twice, the second run replacing the
first's folder)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rlix.sim.choices import bundled_scenario_names, policy_names
from rlix.sim.cli import main


@pytest.mark.parametrize(("parse", "text"), [
    (policy_names, "rlix,static,rlix"),
    (policy_names, "rlix, rlix"),
    (bundled_scenario_names, "tiny,blog-4on12,tiny"),
])
def test_a_name_given_twice_is_refused(parse: object, text: str) -> None:
    twice = text.split(",")[0]
    with pytest.raises(argparse.ArgumentTypeError, match=f"^given twice: {twice}$"):
        parse(text)  # type: ignore[operator]


def test_compare_refuses_a_policy_twice_before_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import rlix.sim.compare as compare

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("ran although --policies was refused")

    monkeypatch.setattr(compare, "compare", never)
    out = tmp_path / "out"
    assert main(["demo", "--quiet", "--policies", "rlix,rlix", "--out", str(out)]) == 2
    assert capsys.readouterr().err == "rlix-sim: error: --policies: given twice: rlix\n"
    assert not out.exists()
