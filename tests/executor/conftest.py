"""Fixtures of the executor tests: one local Ray session per test module (starting one costs
several seconds on 2 cores), with declared GPUs and every listener on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture()
def client(ray_session: object) -> Iterator[Any]:
    """A client of an orchestrator of the test's own (1 node of 4 GPUs): a test that writes or
    kills its run leaves nothing to the next. test_orchestrator.py shares one per module."""
    from rlix.executor.api import Client, start_orchestrator
    from rlix.policy import Topology

    handle = start_orchestrator(Topology(1, 4), tick_s=0.5)
    yield Client(handle)
    ray.get(handle.shutdown.remote())
    ray.kill(handle)
