"""One run folder written once per test session (plots are the slow part), and the figures a
test's plotting call saves, kept for the test to measure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlix.runs import Recorder, write_run
from tests.runs.fake_run import specs, two_pipeline_run

SCENARIO = "name: two pipelines\ntopology: {num_nodes: 1, gpus_per_node: 4}\n"


@pytest.fixture(scope="session")
def recorder() -> Recorder:
    return two_pipeline_run()


@pytest.fixture(scope="session")
def run_dir(recorder: Recorder, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Written with plots; tests must not change it (copy it first)."""
    return write_run(recorder, tmp_path_factory.mktemp("runs") / "run", scenario_yaml=SCENARIO, specs=specs())


@pytest.fixture
def saved_figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every matplotlib Figure saved during the test, in order (each still saved as usual)."""
    from matplotlib.figure import Figure

    saved: list[Any] = []
    save = Figure.savefig

    def keep(self: Figure, *args: Any, **kwargs: Any) -> None:
        saved.append(self)
        save(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return saved
