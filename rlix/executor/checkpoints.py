"""Checkpoints of a live pipeline: written atomically, the newest few kept, read back checked.

A checkpoint is a folder `<pipeline's checkpoints>/ckpt-<sequence>-<adapter>-v<version>/` with
what the workload saves (the trainers' weights, optimizer and RNG states) and, written last,
`checkpoint.json`: pipeline, adapter, version, every adapter's weight version and next step
(the data position: a step's batch is a function of the step), the sequence number, the run
time, the number of events the run's record held (the record position), and the size of every
file it wrote (a read refuses a checkpoint whose files were cut short or lost since).

Atomic: everything is written into a hidden temporary folder beside it and renamed into place
at the end, so a process killed mid-write leaves the previous checkpoints as they were (and a
hidden leftover, removed by the next write). A folder without a readable `checkpoint.json` is
not a checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

CHECKPOINT_FILE = "checkpoint.json"
PREFIX = "ckpt-"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used (one line, naming the file)."""


def checkpoint_name(sequence: int, adapter: str, version: int) -> str:
    return f"{PREFIX}{sequence:05d}-{adapter}-v{version}"


async def write_checkpoint(folder: Path, name: str, save: Callable[[Path], Awaitable[None]],
                           meta: dict[str, Any], keep: int) -> Path:
    """`save` fills a temporary folder, `meta` is written last, then the folder takes `name`;
    afterwards only the newest `keep` checkpoints (and no leftovers) remain in `folder`."""
    from rlix.runs.paths import new_folder

    folder.mkdir(parents=True, exist_ok=True)
    # Not tempfile.mkdtemp, whose 0700 folder would become a checkpoint only its owner can read.
    staging = new_folder(folder, f".{name}.")
    try:
        await save(staging)
        meta = {**meta, "files": _sizes(staging)}
        (staging / CHECKPOINT_FILE).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        final = folder / name
        if final.exists():
            shutil.rmtree(final)
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    prune(folder, keep)
    return final


def list_checkpoints(folder: Path) -> list[Path]:
    """The complete checkpoints in `folder`, oldest first."""
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if p.name.startswith(PREFIX) and (p / CHECKPOINT_FILE).is_file()]
    return sorted(found, key=_order)


def _order(path: Path) -> tuple[int, str]:
    """By sequence number (not by name: the number outgrows its zero padding in a long run)."""
    sequence = path.name[len(PREFIX):].split("-", 1)[0]
    return (int(sequence) if sequence.isdigit() else -1, path.name)


def prune(folder: Path, keep: int) -> None:
    """Keep the newest `keep` checkpoints; remove older ones and leftovers of cut-short writes."""
    for stale in [p for p in folder.iterdir() if p.name.startswith(f".{PREFIX}")]:
        shutil.rmtree(stale, ignore_errors=True)
    for old in list_checkpoints(folder)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The metadata of a checkpoint folder; CheckpointError if it is not a usable one."""
    file = path / CHECKPOINT_FILE
    try:
        meta = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{file}: not a readable checkpoint ({error})") from None
    missing = [k for k in ("pipeline_id", "adapter", "version", "versions", "next_step") if k not in meta]
    if missing:
        raise CheckpointError(f"{file}: missing {', '.join(missing)}")
    for name, size in dict(meta.get("files", {})).items():  # a file cut short, or gone, after the write
        saved = path / name
        found = saved.stat().st_size if saved.is_file() else None
        if found != size:
            raise CheckpointError(f"{saved}: {'missing' if found is None else f'{found} bytes'}, the checkpoint "
                                  f"wrote {size} (damaged: remove the checkpoint folder to resume from the one before)")
    return dict(meta)


def _sizes(folder: Path) -> dict[str, int]:
    """Every file's size, by its path in `folder`: what a read checks the checkpoint against."""
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}
