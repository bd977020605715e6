"""A run or compare that fails or is stopped (Ctrl-C) before its folder is in place leaves no
empty folders behind: the parents it made for its output (`runs/NAME/`) go again, and a
parent that existed before, or that something else wrote to meanwhile, stays."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlix.sim.cli import INTERRUPTED_STATUS, main


def _interrupt(*args: object, **kwargs: object) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("command", [["run", "tiny"], ["compare", "tiny"], ["demo"]])
def test_a_stopped_command_removes_the_parents_it_made(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rlix.sim.api as api
    import rlix.sim.compare as compare

    monkeypatch.setattr(api, "new_simulation", _interrupt)
    monkeypatch.setattr(compare, "compare", _interrupt)
    monkeypatch.chdir(tmp_path)
    assert main([*command, "--quiet", "--no-alone"]) == INTERRUPTED_STATUS  # default runs/tiny/...
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "mine").mkdir()
    out = tmp_path / "mine" / "a" / "b" / "out"
    assert main([*command, "--quiet", "--no-alone", "--out", str(out)]) == INTERRUPTED_STATUS
    assert [p.name for p in tmp_path.iterdir()] == ["mine"] and list((tmp_path / "mine").iterdir()) == []


def test_a_parent_written_to_meanwhile_stays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rlix.sim.api as api

    out = tmp_path / "a" / "b" / "out"

    def write_beside_then_stop(*args: object, **kwargs: object) -> None:
        (tmp_path / "a" / "other.txt").write_text("someone else's")
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "new_simulation", write_beside_then_stop)
    assert main(["run", "tiny", "--quiet", "--no-alone", "--out", str(out)]) == INTERRUPTED_STATUS
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["other.txt"]
