"""Shared fixtures for the ML pieces: one torch thread (the tiny model: tests/executor/conftest.py).

One thread: the machine has 2 cores shared with other work, and oversubscribed OpenMP threads
make small CPU kernels many times slower.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")


@pytest.fixture(autouse=True, scope="session")
def _quiet_single_thread() -> None:
    import transformers

    torch.set_num_threads(1)
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()

