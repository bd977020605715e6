"""Fixtures of the executor tests: one local Ray session per test module (starting one costs
several seconds on 2 cores), with declared GPUs and every listener on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

NUM_GPUS = 4


@pytest.fixture(scope="module")
def ray_session() -> Iterator[object]:
    from rlix.executor import session

    if ray.is_initialized():
        ray.shutdown()
    started = session.start(num_gpus=NUM_GPUS, num_cpus=2)
    yield started
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny model folder per session, built and saved through the normal loading code."""
    pytest.importorskip("transformers")
    from rlix.executor.ml.tiny_model import prepare_model

    return prepare_model("tiny", tmp_path_factory.mktemp("models"))
