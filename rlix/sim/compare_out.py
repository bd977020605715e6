"""The folder `rlix-sim compare` replaces as a whole, checked before it runs and again before
it is replaced: a mistyped --out never deletes someone's files."""

from __future__ import annotations

from pathlib import Path

from rlix.policy import POLICIES
from rlix.traces.options import UsageError

#: The files a compare writes beside its policies' run folders (the plots; none with --json).
_COMPARE_FILES = ("compare.png", "jobs.png")


def check_compare_out(out: Path) -> None:
    """compare replaces the folder `out` as a whole: check it before any run. A folder that is
    not empty must be one compare wrote (a policy's run folder in it, so a mistyped --out never
    overwrites someone's files) and hold nothing else compare would not write again (the
    replacement would delete it). The new folder is made beside `out`, so its parent must be
    writable too."""
    from rlix.runs.errors import RunError
    from rlix.runs.paths import check_writable

    try:
        check_writable(out)
        check_writable(out.parent)
        if not out.is_dir() or not any(out.iterdir()):
            return
        entries = sorted(out.iterdir())
        if not any(_is_policy_run(entry) for entry in entries):
            raise RunError("exists, is not empty and is not a folder rlix-sim compare wrote (none of its "
                           "policy run folders is in it); choose another path", file=out)
        foreign = [entry.name for entry in entries if not _compare_wrote(entry)]
        if foreign:
            names = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            them = "it" if len(foreign) == 1 else "them"
            raise RunError(f"holds {names}, not written by rlix-sim compare (replacing the folder would "
                           f"delete {them}); move {them} out or choose another path", file=out)
    except RunError as error:
        raise UsageError(str(error)) from None


def _is_policy_run(entry: Path) -> bool:
    from rlix.runs.paths import is_run_folder

    return entry.name in POLICIES and is_run_folder(entry)


def _compare_wrote(entry: Path) -> bool:
    """Whether `entry` of a compare folder is something compare writes: a policy's run folder
    (or an empty one), a plot, or the hidden leftover of a policy's run folder that an earlier
    compare was stopped while writing."""
    name = entry.name
    if entry.is_symlink():  # never one of compare's own
        return False
    if name in _COMPARE_FILES:
        return entry.is_file()
    if name in POLICIES:
        return entry.is_dir() and (_is_policy_run(entry) or not any(entry.iterdir()))
    leftover = name.startswith(".") and name[1:].partition(".")[0] in POLICIES
    return leftover and entry.is_dir()
