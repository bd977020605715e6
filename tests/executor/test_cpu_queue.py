"""The bundled cpu-queue scenario on the executor: three tiny pipelines whose homes overlap on 4
declared GPUs, one arriving later. Under `static` they queue in arrival order (a pipeline holds
nothing before the one whose home it overlaps has left), every pipeline finishes, the run
folder passes the invariant checks and replays to exactly the recorded decisions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from rlix.executor.run import ExecutorInputError, RunResult, execute, plan
from rlix.runs.verify import check, replay

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def queued(ray_session: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunResult]:
    out = tmp_path_factory.mktemp("exec") / "cpu-queue"
    yield execute(plan("cpu-queue", policy="static"), out_dir=out, quiet=True, check_invariants=True,
                  timeout_s=900)


def test_static_runs_overlapping_homes_one_after_another(queued: RunResult) -> None:
    assert queued.out_dir is not None
    allocations = pd.read_parquet(Path(queued.out_dir) / "allocations.parquet")
    span = allocations.groupby("pipeline_id").agg(first=("t_start", "min"), last=("t_end", "max"))
    assert set(span.index) == {"ft-a", "ft-b", "lora"}
    assert span.loc["ft-b", "first"] >= span.loc["ft-a", "last"]  # they share GPU 1
    assert span.loc["lora", "first"] >= span.loc["ft-b", "last"]  # GPU 2, and it came later
    steps = pd.read_parquet(Path(queued.out_dir) / "steps.parquet")
    assert steps.groupby("pipeline_id").size().to_dict() == {"ft-a": 4, "ft-b": 4, "lora": 8}


def test_the_queued_run_replays_and_checks(queued: RunResult) -> None:
    assert queued.out_dir is not None
    assert replay(queued.out_dir).identical
    num_allocations, num_attempts = check(queued.out_dir)
    assert num_allocations > 0 and num_attempts >= 3 * 4 * 16


def test_a_sized_home_is_refused_before_ray_starts(tmp_path: Path) -> None:
    from rlix.scenarios import load_scenario

    data = load_scenario("cpu-queue").model_dump(mode="json", exclude_none=True)
    data["pipelines"][0]["home"] = 2
    from rlix.scenarios.load import validate_scenario

    with pytest.raises(ExecutorInputError, match="home given as a size"):
        plan(validate_scenario(data))
