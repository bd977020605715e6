"""Shared fixtures for the ML pieces: one tiny model folder per session, one torch thread.

One thread: the machine has 2 cores shared with other work, and oversubscribed OpenMP threads
make small CPU kernels many times slower.
"""

from __future__ import annotations

from pathlib import Path

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


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rlix.executor.ml.tiny_model import prepare_model

    return prepare_model("tiny", tmp_path_factory.mktemp("models"))
