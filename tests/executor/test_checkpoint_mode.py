"""A checkpoint folder is made as mkdir makes one (the umask decides its mode), not 0700 as
tempfile.mkdtemp makes it, so a lab sharing a run can read its checkpoints."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from rlix.executor.checkpoints import checkpoint_name, list_checkpoints, write_checkpoint


@pytest.mark.parametrize("umask", [0o022, 0o077], ids=oct)
def test_a_checkpoint_folder_honours_the_umask(tmp_path: Path, umask: int) -> None:
    async def save(into: Path) -> None:
        (into / "weights.bin").write_bytes(b"w")

    meta = {"pipeline_id": "ft", "adapter": "base", "version": 1, "versions": {"base": 1}, "next_step": {"base": 1}}
    previous = os.umask(umask)
    try:
        final = asyncio.run(write_checkpoint(tmp_path, checkpoint_name(1, "base", 1), save, meta, keep=2))
    finally:
        os.umask(previous)
    assert list_checkpoints(tmp_path) == [final]
    assert final.stat().st_mode & 0o777 == 0o777 & ~umask
    assert (final / "weights.bin").stat().st_mode & 0o777 == 0o666 & ~umask
