"""run's and compare's --out is replaced as a whole (written beside it, renamed into place), so
the current folder, or one holding it, is refused in one line before anything runs: `--out .`
in an empty folder simulated every policy and only then failed, its own staging folder in the
way."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlix.sim.cli import BAD_INPUT_STATUS, main


def _never(*args: object, **kwargs: object) -> None:
    raise AssertionError("simulated although --out was refused")


@pytest.mark.parametrize("command", [["run", "tiny"], ["compare", "tiny"], ["demo"]])
@pytest.mark.parametrize("out", [".", "./", "..", "{here}"])
def test_the_current_folder_or_one_above_it_is_refused_before_running(
    command: list[str], out: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import rlix.sim.api as api
    import rlix.sim.compare as compare

    here = tmp_path / "empty"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setattr(api, "new_simulation", _never)
    monkeypatch.setattr(compare, "compare", _never)
    with pytest.raises(SystemExit) as done:
        main([*command, "--quiet", "--no-alone", "--out", out.format(here=here)])
    assert done.value.code == BAD_INPUT_STATUS
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "argument --out:" in err and "is the current folder or holds it" in err
    assert list(here.iterdir()) == [] and [p.name for p in tmp_path.iterdir()] == ["empty"]


def test_a_folder_in_the_current_one_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--quiet", "--no-alone", "--policies", "static", "--out", "./here"]) == 0
    assert (tmp_path / "here" / "static" / "summary.json").is_file()
