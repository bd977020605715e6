"""Fixtures of the executor tests: one local Ray session per test module (starting one costs
several seconds on 2 cores), with declared GPUs and every listener on loopback."""

from __future__ import annotations

from collections.abc import Iterator

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
