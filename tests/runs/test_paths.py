"""Output paths are checked before any work and only rlix's own folders are ever replaced."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rlix.runs.errors import RunError
from rlix.runs.paths import check_out_dir, check_out_file, check_writable, is_run_folder


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _run_folder(folder: Path, marker: str = "summary.json") -> Path:
    folder.mkdir(parents=True)
    if marker == "summary.json":
        (folder / marker).write_text(json.dumps({"overall": {}}))
    else:
        (folder / marker).write_text(json.dumps({"header": {"policy": "rlix"}}) + "\n")
    return folder


def test_absent_and_empty_folders_pass_and_nothing_is_left(tmp_path: Path) -> None:
    assert check_out_dir(tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper"
    (tmp_path / "empty").mkdir()
    check_out_dir(tmp_path / "empty")
    assert _entries(tmp_path) == ["empty"]  # the probe is gone, nothing was created
    assert _entries(tmp_path / "empty") == []


@pytest.mark.parametrize("make", ["file", "under_file"])
def test_a_file_in_the_way_is_one_line(tmp_path: Path, make: str) -> None:
    (tmp_path / "afile").write_text("keep me")
    target = tmp_path / "afile" if make == "file" else tmp_path / "afile" / "sub"
    with pytest.raises(RunError) as error:
        check_out_dir(target, overwrite=True)
    assert str(target) in str(error.value) and "\n" not in str(error.value)
    assert (tmp_path / "afile").read_text() == "keep me"


def test_an_unwritable_place_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="cannot be written"):
        check_out_dir("/proc/rlix-test/run")
    if os.geteuid() != 0:  # root writes anywhere: only the /proc case holds for it
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(RunError, match="cannot be written"):
            check_out_dir(locked / "run")


def test_a_folder_that_is_not_a_run_is_never_replaced(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "results.csv").write_text("precious")
    for overwrite in (False, True):
        with pytest.raises(RunError, match="not an rlix run folder"):
            check_out_dir(data, overwrite=overwrite)
    # a look-alike: a summary.json that is not JSON, an events.jsonl without rlix's header
    (data / "summary.json").write_text("not json")
    (data / "events.jsonl").write_text('{"event": 1}\n')
    assert not is_run_folder(data)
    with pytest.raises(RunError, match="not an rlix run folder"):
        check_out_dir(data, overwrite=True)


@pytest.mark.parametrize("marker", ["summary.json", "events.jsonl"])
def test_a_run_folder_needs_overwrite(tmp_path: Path, marker: str) -> None:
    run = _run_folder(tmp_path / "run", marker)
    assert is_run_folder(run)
    with pytest.raises(RunError, match="--overwrite"):
        check_out_dir(run)
    check_out_dir(run, overwrite=True)


def test_writable_and_file_checks(tmp_path: Path) -> None:
    check_writable(tmp_path / "a" / "b")
    (tmp_path / "f").write_text("x")
    with pytest.raises(RunError, match="not a folder"):
        check_writable(tmp_path / "f")
    check_out_file(tmp_path / "new" / "trace.parquet")
    with pytest.raises(RunError, match="is a folder"):
        check_out_file(tmp_path)
    with pytest.raises(RunError, match="is a file"):
        check_out_file(tmp_path / "f" / "trace.parquet")
    assert _entries(tmp_path) == ["f"]


def test_write_run_refuses_to_replace_a_folder_it_did_not_write(tmp_path: Path) -> None:
    from rlix.runs.folder import write_run
    from tests.runs.fake_run import two_pipeline_run as finished_recorder

    data = tmp_path / "data"
    data.mkdir()
    (data / "keep.txt").write_text("precious")
    with pytest.raises(RunError, match="not an rlix run folder"):
        write_run(finished_recorder(), data, scenario_yaml="", overwrite=True, plots=False)
    assert _entries(data) == ["keep.txt"]
    run = write_run(finished_recorder(), tmp_path / "run", scenario_yaml="", plots=False)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["finished"] is True and summary["faults"] == []
    write_run(finished_recorder(), run, scenario_yaml="", overwrite=True, plots=False)  # its own: replaced


def test_a_replace_that_fails_leaves_the_old_run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--overwrite puts the new folder in place before the old one goes: a failure in between
    (here, the rename into place) leaves the old run whole and no hidden folder behind."""
    from rlix.runs.folder import write_run
    from tests.runs.fake_run import two_pipeline_run as finished_recorder

    run = write_run(finished_recorder(), tmp_path / "run", scenario_yaml="old", plots=False)
    real_rename = Path.rename

    def rename(self: Path, target: str | os.PathLike[str]) -> Path:
        if Path(target) == run and self.name.startswith(".run.") and ".old." not in self.name:
            raise OSError(5, "Input/output error")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(OSError, match="Input/output"):
        write_run(finished_recorder(), run, scenario_yaml="new", overwrite=True, plots=False)
    assert (run / "scenario.yaml").read_text() == "old" and (run / "summary.json").exists()
    assert _entries(tmp_path) == ["run"]


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077], ids=oct)
def test_a_new_folder_is_made_as_mkdir_makes_one(tmp_path: Path, umask: int) -> None:
    """Not 0700 as tempfile.mkdtemp makes it: a run folder others of the lab can read when the
    umask lets them, and private when it does not."""
    from rlix.runs.paths import new_folder

    previous = os.umask(umask)
    try:
        made = [new_folder(tmp_path, ".run.") for _ in range(3)]
        (tmp_path / "by-mkdir").mkdir()
    finally:
        os.umask(previous)
    assert len(set(made)) == 3 and all(p.parent == tmp_path and p.name.startswith(".run.") for p in made)
    want = (tmp_path / "by-mkdir").stat().st_mode & 0o7777
    assert want == 0o777 & ~umask
    assert {p.stat().st_mode & 0o7777 for p in made} == {want}


def test_a_writable_folder_in_a_parent_that_takes_no_new_folder_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The folder is written beside itself and renamed into place, so its parent must take a
    new folder (root writes anywhere, so the parent's refusal is staged)."""
    import tempfile

    parent, run = tmp_path / "shared", tmp_path / "shared" / "mine"
    run.mkdir(parents=True)
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp(prefix: str | None = None, dir: str | Path | None = None) -> str:
        if dir is not None and Path(dir) == parent:
            raise PermissionError(13, "Permission denied")
        return real_mkdtemp(prefix=prefix, dir=dir)

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    check_writable(run)  # the folder itself takes files
    with pytest.raises(RunError, match=f"cannot be written \\(in {parent}\\): Permission denied"):
        check_out_dir(run)


def _dead_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_killed_runs_half_written_folder_is_removed_by_the_next(tmp_path: Path) -> None:
    """A run killed outright leaves its hidden folder; the next folder made beside it removes
    it, and leaves those of live processes and of other hosts (whose ids are not ours to look
    up), and anything else hidden there."""
    from rlix.runs.paths import _host, new_folder

    host = _host()
    dead = tmp_path / f".run.{host}-{_dead_pid()}-0123abcd"
    alive = tmp_path / f".run.{host}-{os.getpid()}-0123abcd"
    elsewhere = tmp_path / f".run.other_host-{_dead_pid()}-0123abcd"
    checkpoint = tmp_path / f".step-3.{host}-{_dead_pid()}-89abcdef"
    mine = tmp_path / ".config"
    for folder in (dead, alive, elsewhere, checkpoint, mine):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "table.parquet").write_text("half")
    made = new_folder(tmp_path, ".run.")
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {alive.name, elsewhere.name, mine.name, made.name}
    assert made.name.startswith(f".run.{host}-{os.getpid()}-")


def test_a_live_runs_folder_is_left_by_a_process_in_another_pid_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container with the host's name (docker --network host) has its own process ids: the
    live run's id is none of its processes, so it must not take the run's hidden folder for a
    killed run's (it removed it, under the run, found by `unshare --pid --fork --mount-proc`)."""
    from rlix.runs import paths

    monkeypatch.setattr(paths, "_pid_namespace", lambda: "", raising=False)
    live = paths.new_folder(tmp_path, ".run.")  # a run outside any container, still going
    monkeypatch.setattr(paths, "_pid_namespace", lambda: "pidns4026532999", raising=False)
    monkeypatch.setattr(paths, "_alive", lambda pid: False)  # as that namespace sees our id
    made = paths.new_folder(tmp_path, ".run.")
    assert live.is_dir()
    assert "_pidns4026532999-" in made.name
