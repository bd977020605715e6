"""One run folder written once per test session (plots are the slow part)."""

from __future__ import annotations

from pathlib import Path

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
