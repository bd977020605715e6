"""Output paths, checked before any work starts, and replaced only when they are rlix's own.

A run can take hours (a live run) or minutes (a simulated day); finding at its end that its
folder cannot be written throws the run away. So every CLI checks its output path first:
`check_out_dir` for folders (run folders, compare and sweep folders), `check_out_file` for
single files (traces). Both raise `RunError` naming the path, and write nothing: whether the
place can be written is tried by creating and removing a probe folder in the nearest existing
ancestor, which is what the real write will need (permission bits alone do not say: `/proc`
is mode 555 yet root may not create there).

`--overwrite` replaces a folder only if rlix wrote it (`is_run_folder`: it holds a
`summary.json` or an `events.jsonl` whose first line is an rlix header); anything else is
refused, so a mistyped path never deletes someone's data.

A folder is written whole into a hidden sibling (`new_folder`) and then renamed into its place
(`put_in_place`). The sibling is made as `mkdir` makes a folder, not private as
`tempfile.mkdtemp` makes it (mode 0700), because it becomes the output others may need to read.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import socket
import tempfile
from pathlib import Path

from rlix.runs.errors import RunError

log = logging.getLogger(__name__)

#: Files whose presence marks a folder as a run folder written by rlix.
MARKER_FILES = ("summary.json", "events.jsonl")


def is_simulator_summary(summary: object) -> bool:
    """True when a run folder's summary.json (parsed) is the simulator's: only its summary
    names the pipelines that did not finish (`unfinished`, rlix.sim.api), a live run's never."""
    return isinstance(summary, dict) and "unfinished" in summary


def is_run_folder(folder: Path) -> bool:
    """True when `folder` was written by rlix: a marker file that looks like rlix's."""
    for name in MARKER_FILES:
        path = folder / name
        if not path.is_file():
            continue
        try:
            with path.open(encoding="utf-8") as handle:
                record = json.loads(handle.readline() if name == "events.jsonl" else handle.read())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and (name != "events.jsonl" or "header" in record):
            return True
    return False


def check_out_dir(folder: str | os.PathLike[str], overwrite: bool = False) -> Path:
    """The run folder a command will write, checked: RunError unless it is absent, empty or an
    rlix folder with `overwrite`, and unless it and its parent can be written."""
    folder = Path(folder)
    check_writable(folder)
    # The folder is written whole beside itself and renamed into place: its parent must take
    # a new folder too, even when the folder itself can be written.
    _probe(_existing_ancestor(folder.absolute().parent), folder)
    if folder.is_dir() and any(folder.iterdir()):
        if not is_run_folder(folder):
            raise RunError("exists, is not empty and is not an rlix run folder; choose another path "
                           "(--overwrite, overwrite=True in Python, replaces only folders rlix wrote)", file=folder)
        if not overwrite:
            raise RunError("run folder exists and is not empty; choose another or overwrite it "
                           "(--overwrite, overwrite=True in Python)",
                           file=folder)
    return folder


def check_writable(folder: str | os.PathLike[str]) -> Path:
    """A folder that will be written (created if absent): RunError if it is a file, lies under
    a file, or cannot be written."""
    folder = Path(folder)
    if folder.exists() or folder.is_symlink():
        if not folder.is_dir():
            raise RunError("exists and is not a folder", file=folder)
        _probe(folder, folder)
    else:
        _probe(_existing_ancestor(folder), folder)
    return folder


def check_out_file(file: str | Path) -> Path:
    """A single output file (a trace): its folder must exist or be creatable, and writable."""
    file = Path(file)
    if file.is_dir():
        raise RunError("is a folder; give a file name", file=file)
    parent = file.parent
    _probe(_existing_ancestor(parent), file)
    return file


def _existing_ancestor(path: Path) -> Path:
    """The nearest ancestor that exists; RunError if it is a file (`file/sub`)."""
    for ancestor in [path, *path.absolute().parents]:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise RunError(f"{ancestor} is a file, so nothing can be written under it", file=path)
            return ancestor
    return Path("/")  # pragma: no cover - the root always exists


def _probe(folder: Path, target: Path) -> None:
    """Create and remove a hidden folder in `folder`: can `target` be written there at all?"""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".rlix-probe-", dir=folder))
    except OSError as error:
        where = "" if folder == target else f" (in {folder})"
        raise RunError(f"cannot be written{where}: {error.strerror or error}", file=target) from None


def new_folder(parent: Path, prefix: str) -> Path:
    """A new folder named `prefix` + this host + this process id + random letters in `parent`,
    made by a plain mkdir: its mode is 0777 less the umask (or what the parent's default ACL
    says) and its group the parent's when that is setgid, as for any folder the user makes. Not
    `tempfile.mkdtemp`, which makes it 0700: a run folder its owner's lab cannot read.

    A run killed outright (SIGKILL, out of memory) leaves its folder half written and hidden;
    the host and process id in the name let the next one made in `parent` remove it
    (`remove_abandoned`), where a streamed simulated week could leave gigabytes no one sees."""
    remove_abandoned(parent)
    owner = f"{_host()}-{os.getpid()}-"
    for _ in range(tempfile.TMP_MAX):
        folder = parent / f"{prefix}{owner}{secrets.token_hex(4)}"
        try:
            folder.mkdir()
        except FileExistsError:  # another writer drew the same name: draw again
            continue
        return folder
    raise FileExistsError(f"{parent}: no free name for a new folder {prefix}*")  # pragma: no cover


def remove_abandoned(parent: Path) -> list[Path]:
    """Remove the hidden folders `new_folder` made in `parent` for processes of this host that
    no longer run; return them. Another host's are left alone: its process ids are not ours
    to look up (a shared file system); so are another PID namespace's on this host (`_host`)."""
    pattern = re.compile(rf"^\..+\.{re.escape(_host())}-(\d+)-[0-9a-f]{{8}}$")
    removed: list[Path] = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = pattern.match(entry.name)
        if match is None or _alive(int(match.group(1))) or not entry.is_dir() or entry.is_symlink():
            continue
        shutil.rmtree(entry, ignore_errors=True)
        log.warning("removed %s, left half written by a run that was killed", entry)
        removed.append(entry)
    return removed


#: The kernel's first PID namespace (PROC_PID_INIT_INO): the one of a process in no container.
_INIT_PID_NAMESPACE = 0xEFFFFFFC


def _host() -> str:
    """This host's name as a file name's part (letters, digits and underscores), with the PID
    namespace when it is not the kernel's first: a container run with the host's name (docker
    `--network host`, a pod on the host network) sees other process ids than the host and its
    other containers, so a live run's folder must not look like one of its dead processes'."""
    name = re.sub(r"[^A-Za-z0-9]", "_", socket.gethostname()) or "host"
    namespace = _pid_namespace()
    return f"{name}_{namespace}" if namespace else name


def _pid_namespace() -> str:
    """`pidns` + this process's PID namespace (its inode), or "" in the first one or without /proc."""
    try:
        inode = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return ""
    return "" if inode == _INIT_PID_NAMESPACE else f"pidns{inode}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it runs, as another user's process
        pass
    return True


def put_in_place(new: Path, folder: Path) -> None:
    """Rename the finished folder `new` to `folder`, replacing what is there: the old one is
    renamed aside first and removed only once `new` is in its place (put back if that fails),
    so at every moment one of the two complete folders is there."""
    if not folder.exists():
        new.rename(folder)
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old.", dir=folder.parent))
    aside.rmdir()  # the name is ours; rename needs it free
    folder.rename(aside)
    try:
        new.rename(folder)
    except BaseException:
        aside.rename(folder)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def missing_parents(folder: str | Path) -> list[Path]:
    """The folders above `folder` that do not exist yet, deepest first: those a command makes
    for its output, and removes again (`remove_if_empty`) when it fails or is stopped, so a run
    that wrote nothing leaves no empty `runs/NAME/` behind."""
    missing = []
    parent = Path(os.path.abspath(folder)).parent
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    return missing


def remove_if_empty(folders: list[Path]) -> None:
    """Remove `folders` (deepest first) while each is empty; one that is not (something else
    wrote there meanwhile) is kept, and so is every folder above it."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return
