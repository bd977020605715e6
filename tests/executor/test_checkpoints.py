"""Checkpoints are atomic: a write cut short (an exception, or SIGKILL) leaves the previous ones
as they were and loadable; only the newest K are kept; a damaged one is refused in one line."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rlix.executor.checkpoints import (  # noqa: E402
    CHECKPOINT_FILE,
    CheckpointError,
    checkpoint_name,
    list_checkpoints,
    read_checkpoint,
    write_checkpoint,
)
from rlix.executor.ml.actor import ActorTrainer  # noqa: E402
from rlix.executor.ml.batch import build_batch  # noqa: E402
from rlix.executor.ml_workload import DEFAULTS, RNG_FILE, MlTrainer  # noqa: E402


def _meta(version: int) -> dict[str, Any]:
    return {"pipeline_id": "ft", "adapter": "base", "version": version, "versions": {"base": version},
            "next_step": {"base": version}}


def _write(folder: Path, trainer: MlTrainer, version: int, keep: int = 2) -> Path:
    async def save(into: Path) -> None:
        trainer.save_checkpoint(str(into))

    return asyncio.run(write_checkpoint(folder, checkpoint_name(version, "base", version), save, _meta(version), keep))


def _step(trainer: MlTrainer) -> None:
    batch = build_batch([list(b"say a:")], [list(b"aaa")], pad_token_id=257)
    old = trainer.run("old_log_probs", batch)
    trainer.run("train_step", batch, torch.tensor([1.0]), old, None)


@pytest.fixture
def trainer(tiny_model_path: Path) -> MlTrainer:
    return MlTrainer({**DEFAULTS, "model_path": str(tiny_model_path), "actor_lr": 1e-2, "device": "cpu"},
                     "actor_train", None)


def test_only_the_newest_are_kept_and_each_loads(trainer: MlTrainer, tmp_path: Path,
                                                 tiny_model_path: Path) -> None:
    for version in (1, 2, 3):
        _step(trainer)
        _write(tmp_path, trainer, version)
    kept = list_checkpoints(tmp_path)
    assert [read_checkpoint(p)["version"] for p in kept] == [2, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == [p.name for p in kept]  # nothing else
    restored = ActorTrainer(tiny_model_path)
    restored.load(kept[-1])
    assert restored.version == 3
    assert (kept[-1] / RNG_FILE).exists()
    for mine, theirs in zip(restored.model.state_dict().values(), trainer.model.model.state_dict().values(), strict=True):
        assert torch.equal(mine, theirs)


def test_a_write_that_fails_midway_leaves_the_previous_one(trainer: MlTrainer, tmp_path: Path,
                                                          tiny_model_path: Path) -> None:
    _write(tmp_path, trainer, 1)

    async def half(into: Path) -> None:
        (into / "model.safetensors").write_bytes(b"half a file")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        asyncio.run(write_checkpoint(tmp_path, checkpoint_name(2, "base", 2), half, _meta(2), keep=2))
    assert [p.name for p in tmp_path.iterdir()] == [checkpoint_name(1, "base", 1)]
    ActorTrainer(tiny_model_path).load(tmp_path / checkpoint_name(1, "base", 1))


KILLED_WRITER = """
import asyncio, sys, time
from pathlib import Path
from rlix.executor.checkpoints import write_checkpoint

async def slow(into):
    (into / "model.safetensors").write_bytes(b"partial")
    print("writing", flush=True)
    time.sleep(60)

meta = {"pipeline_id": "ft", "adapter": "base", "version": 2, "versions": {}, "next_step": {}}
asyncio.run(write_checkpoint(Path(sys.argv[1]), "ckpt-00002-base-v2", slow, meta, 2))
"""


def test_a_writer_killed_midway_leaves_the_previous_one(trainer: MlTrainer, tmp_path: Path,
                                                       tiny_model_path: Path) -> None:
    first = _write(tmp_path, trainer, 1)
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    assert list_checkpoints(tmp_path) == [first]  # the cut-short one is not a checkpoint
    assert any(p.name.startswith(".ckpt-") for p in tmp_path.iterdir())  # its leftover
    ActorTrainer(tiny_model_path).load(first)
    time.sleep(0.01)
    _step(trainer)
    _write(tmp_path, trainer, 3)
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # the next write cleans up


def test_a_damaged_checkpoint_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "ckpt-00001-base-v1").mkdir()
    (tmp_path / "ckpt-00001-base-v1" / CHECKPOINT_FILE).write_text("{not json")
    with pytest.raises(CheckpointError) as error:
        read_checkpoint(tmp_path / "ckpt-00001-base-v1")
    assert CHECKPOINT_FILE in str(error.value) and "\n" not in str(error.value)
    (tmp_path / "ckpt-00001-base-v1" / CHECKPOINT_FILE).write_text(json.dumps({"pipeline_id": "ft"}))
    with pytest.raises(CheckpointError, match="missing adapter, version, versions, next_step"):
        read_checkpoint(tmp_path / "ckpt-00001-base-v1")


def test_checkpoints_are_in_sequence_past_the_zero_padding(tmp_path: Path) -> None:
    names = ["ckpt-99999-base-v99999", "ckpt-100000-base-v100000", "ckpt-00002-base-v2"]
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / CHECKPOINT_FILE).write_text("{}")
    assert [p.name for p in list_checkpoints(tmp_path)] == [names[2], names[0], names[1]]


def test_a_checkpoint_whose_files_were_cut_short_is_refused(tmp_path: Path) -> None:
    """A resume reads checkpoint.json only; the sizes it records catch weights cut short or
    lost after the write (a full disk elsewhere, a copy interrupted), before any trainer loads
    them."""
    async def save(folder: Path) -> None:
        (folder / "model.safetensors").write_bytes(b"w" * 1000)
        (folder / "optimizer").mkdir()
        (folder / "optimizer" / "state.pt").write_bytes(b"o" * 10)

    meta = {"pipeline_id": "ft", "adapter": "base", "version": 1, "versions": {"base": 1}, "next_step": {"base": 1}}
    path = asyncio.run(write_checkpoint(tmp_path, checkpoint_name(1, "base", 1), save, meta, keep=2))
    assert read_checkpoint(path)["files"] == {"model.safetensors": 1000, "optimizer/state.pt": 10}
    (path / "model.safetensors").write_bytes(b"w" * 600)
    with pytest.raises(CheckpointError, match=r"model.safetensors: 600 bytes, the checkpoint wrote 1000 \(damaged"):
        read_checkpoint(path)
    (path / "model.safetensors").write_bytes(b"w" * 1000)
    (path / "optimizer" / "state.pt").unlink()
    with pytest.raises(CheckpointError, match="state.pt: missing"):
        read_checkpoint(path)
