"""`rlix-sim compare --out` refuses a folder compare did not write (before any run) and writes
again where it wrote; `run --days` too large for a number names --days; the --costs help is
whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlix.sim.cli import build_parser, main


def test_compare_refuses_a_folder_it_did_not_write(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import rlix.sim.compare as compare

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "compare.png").write_bytes(b"the user's own plot")

    def no_comparison(*args: object, **kwargs: object) -> None:
        raise AssertionError("compared although the folder was refused")

    monkeypatch.setattr(compare, "compare", no_comparison)
    assert main(["compare", "tiny", "--quiet", "--no-alone", "--policies", "static", "--out", str(mine)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{mine}: exists, is not empty and is not a folder rlix-sim compare wrote" in err
    assert (mine / "compare.png").read_bytes() == b"the user's own plot" and len(list(mine.iterdir())) == 1


def test_compare_writes_again_where_it_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    args = ["compare", "tiny", "--quiet", "--no-alone", "--policies", "static", "--out", str(out)]
    assert main(args) == 0
    assert main([*args[:-3], "rlix,static", "--out", str(out)]) == 0
    assert (out / "rlix" / "summary.json").is_file() and (out / "compare.png").is_file()


def test_days_too_many_for_a_number_name_days(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["run", "tiny", "--days", "1e305", "--quiet", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlix-sim: error: --days: 1e+305 days") and err.count("\n") == 1, err
    assert "tiny.yaml" not in err and "max_time_s" not in err


def test_the_costs_help_is_whole(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--costs FILE a calibrated cost file (rlix-sim calibrate) replacing the scenario's `costs` section" in text
