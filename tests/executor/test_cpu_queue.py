"""The bundled cpu-queue scenario on the executor: three tiny pipelines on 4 declared GPUs, two
whose homes overlap and one arriving later with a home given as a size. Under `static` they
queue in arrival order (a pipeline holds nothing before the one whose home it overlaps has
left; the sized home is placed on GPUs nobody running holds), every pipeline finishes, the run
folder passes the invariant checks and replays to exactly the recorded decisions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlix.executor.live import RunResult, execute
from rlix.executor.run import ExecutorInputError, plan
from rlix.runs import load
from rlix.runs.verify import check, replay

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def queued(ray_session: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunResult]:
    out = tmp_path_factory.mktemp("exec") / "cpu-queue"
    yield execute(plan("cpu-queue", policy="static"), out_dir=out, quiet=True, check_invariants=True,
                  timeout_s=900)


def test_static_runs_overlapping_homes_one_after_another(queued: RunResult) -> None:
    assert queued.out_dir is not None
    run = load(queued.out_dir)
    span = run.allocations.groupby("pipeline_id").agg(first=("t_start", "min"), last=("t_end", "max"))
    assert set(span.index) == {"ft-a", "ft-b", "lora"}
    assert span.loc["ft-b", "first"] >= span.loc["ft-a", "last"]  # they share GPU 1
    assert span.loc["lora", "first"] >= span.loc["ft-b", "first"]  # it came later: FIFO
    lora_home = set(run.specs["lora"].home)  # placed by the core, as the event log says
    assert len(lora_home) == 2
    for other in ("ft-a", "ft-b"):
        if span.loc[other, "last"] > span.loc["lora", "first"]:
            assert lora_home.isdisjoint(run.specs[other].home), other
    held = set(run.allocations[run.allocations.pipeline_id == "lora"].gpu)
    assert held <= lora_home  # static keeps it on its home
    steps = run.steps
    assert steps.groupby("pipeline_id").size().to_dict() == {"ft-a": 4, "ft-b": 4, "lora": 8}


def test_the_queued_run_replays_and_checks(queued: RunResult) -> None:
    assert queued.out_dir is not None
    assert replay(queued.out_dir).identical
    num_allocations, num_attempts = check(queued.out_dir)
    assert num_allocations > 0 and num_attempts >= 3 * 4 * 16


def test_a_home_across_nodes_is_refused_before_ray_starts() -> None:
    from rlix.scenarios import load_scenario
    from rlix.scenarios.load import validate_scenario

    data = load_scenario("cpu-queue").model_dump(mode="json", exclude_none=True)
    data["topology"] = {"num_nodes": 2, "gpus_per_node": 2}
    data["pipelines"] = [data["pipelines"][2]]
    data["pipelines"][0]["home"] = 4
    with pytest.raises(ExecutorInputError, match="spans nodes"):
        plan(validate_scenario(data))
