"""`rlix-sim compare --out DIR` replaces DIR as a whole: afterwards it holds exactly the new
compare (no run folder of a policy an earlier compare ran), a compare that fails midway leaves
the earlier one whole, and files compare did not write refuse the folder before any run. The
folders `compare` and `run` write are made as mkdir makes them (the umask decides), not 0700."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlix.sim.cli import main

COMPARE = ["compare", "tiny", "--quiet", "--no-alone", "--out"]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def test_a_compare_of_fewer_policies_leaves_no_earlier_policy_behind(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    assert main([*COMPARE, str(out), "--policies", "rlix,static"]) == 0
    assert _entries(out) == ["compare.png", "jobs.png", "rlix", "static"]
    assert main([*COMPARE, str(out), "--policies", "rlix"]) == 0
    assert _entries(out) == ["compare.png", "jobs.png", "rlix"]
    assert _entries(tmp_path) == ["cmp"]  # nothing hidden left beside it


def test_a_json_compare_leaves_no_plot_of_the_earlier_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    assert main([*COMPARE, str(out), "--policies", "static"]) == 0
    assert main([*COMPARE, str(out), "--policies", "rlix", "--json"]) == 0
    assert _entries(out) == ["rlix"]


def test_a_compare_that_fails_midway_leaves_the_earlier_one_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rlix.sim.compare as compare
    from rlix.sim.api import simulate

    out = tmp_path / "cmp"
    assert main([*COMPARE, str(out), "--policies", "rlix,static"]) == 0
    before = _files(out)

    def fails_on_static(scenario: Any, policy: Any = None, **kwargs: Any) -> Any:
        if policy == "static":
            raise RuntimeError("the second policy's run fails")
        return simulate(scenario, policy, **kwargs)

    monkeypatch.setattr(compare, "simulate", fails_on_static)
    with pytest.raises(RuntimeError, match="second policy"):
        # Another seed, so rlix's new run folder (written before static's run fails) differs.
        main([*COMPARE, str(out), "--policies", "rlix,static", "--seed", "12345"])
    assert _files(out) == before
    assert _entries(tmp_path) == ["cmp"]


def test_files_compare_did_not_write_refuse_the_folder_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import rlix.sim.compare as compare

    out = tmp_path / "cmp"
    assert main([*COMPARE, str(out), "--policies", "static"]) == 0
    (out / "notes.txt").write_text("the user's notes")
    before = _files(out)
    capsys.readouterr()

    def no_comparison(*args: object, **kwargs: object) -> None:
        raise AssertionError("compared although the folder was refused")

    monkeypatch.setattr(compare, "compare", no_comparison)
    assert main([*COMPARE, str(out), "--policies", "static"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"{out}: holds notes.txt, not written by rlix-sim compare" in err and "move it out" in err
    assert _files(out) == before


def test_a_link_to_a_compare_folder_stays_a_link_to_the_new_compare(tmp_path: Path) -> None:
    real = tmp_path / "real"
    link = tmp_path / "link"
    link.symlink_to(real.name)
    assert main([*COMPARE, str(link), "--policies", "rlix,static"]) == 0
    assert main([*COMPARE, str(link), "--policies", "static"]) == 0
    assert link.is_symlink() and _entries(real) == ["compare.png", "jobs.png", "static"]
    assert _entries(tmp_path) == ["link", "real"]


@pytest.mark.usefixtures("umask_022")
def test_compare_and_run_folders_honour_the_umask(tmp_path: Path) -> None:
    assert main([*COMPARE, str(tmp_path / "cmp"), "--policies", "static"]) == 0
    assert main(["run", "tiny", "--quiet", "--no-alone", "--out", str(tmp_path / "run")]) == 0
    for folder in (tmp_path / "cmp", tmp_path / "cmp" / "static", tmp_path / "run"):
        assert folder.stat().st_mode & 0o777 == 0o755, folder
    for file in (tmp_path / "cmp" / "compare.png", tmp_path / "run" / "summary.json"):
        assert file.stat().st_mode & 0o777 == 0o644, file
