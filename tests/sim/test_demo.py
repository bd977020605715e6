"""`rlix-sim demo` runs the bundled scenario under every policy, invariants checked."""

from __future__ import annotations

import re

import pytest

from rlix.sim.cli import main
from rlix.sim.demo import scenario
from rlix.traces import load_bundled


def bundled_max_steps() -> int:
    """The most steps both bundled traces hold, counted from the traces themselves."""
    return min(load_bundled(name)["step"].nunique() for name in ("agentic_small", "math_small"))


def test_demo_runs_and_sharing_beats_sequential(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--steps", "2", "--show", "5"]) == 0
    out = capsys.readouterr().out
    assert "under 'rlix'" in out
    makespans = {m[0]: float(m[1]) for m in re.findall(r"^(\S+)\s+([\d.]+)\s+[\d.]+\s+\d+$", out, re.M)}
    assert {"rlix", "sequential", "static"} <= set(makespans)
    assert makespans["rlix"] < makespans["sequential"]


def test_demo_help_teaches(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["demo", "--help"])
    assert info.value.code == 0
    assert "--load-s" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("option", "value", "fragment"),
    [
        ("--steps", "0", "must be a positive integer, not '0'"),
        ("--steps", "-1", "must be a positive integer, not '-1'"),
        ("--steps", "2.5", "must be an integer, not '2.5'"),
        ("--tokens-per-gpu-s", "0", "must be a number above 0, not '0'"),
        ("--tokens-per-gpu-s", "nan", "must be a finite number, not 'nan'"),
        ("--load-s", "-5", "must be 0 or more, not '-5'"),
        ("--load-s", "inf", "must be a finite number, not 'inf'"),
        ("--preempt-loss-s", "-1", "must be 0 or more, not '-1'"),
        ("--max-time-s", "0", "must be a number above 0, not '0'"),
        ("--show", "-1", "must be 0 or more, not '-1'"),
    ],
)
def test_bad_option_is_one_line_at_parsing(
    option: str, value: str, fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["demo", option, value])
    assert info.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"rlix-sim demo: error: argument {option}: {fragment}")


def test_steps_beyond_the_bundled_traces_name_the_maximum(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RLIX_DEBUG", raising=False)
    most = bundled_max_steps()
    assert [job.num_steps for job in scenario(most, 2500.0)] == [most, most]
    assert main(["demo", "--steps", str(most + 1)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"rlix-sim: error: --steps {most + 1}: at most {most}, the steps the bundled trace "
        "'math_small' holds\n"
    )


def test_help_states_the_step_maximum(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"at most {bundled_max_steps()}, the steps of the bundled math trace" in help_text


def test_show_zero_prints_no_decision(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--steps", "1", "--show", "0"]) == 0
    out = capsys.readouterr().out
    assert "  t=" not in out and "  ...\n" in out
