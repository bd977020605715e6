"""Weights prefetched before an init (rlix.pipelines.ops.Prefetch), in the simulator.

On blog-4on12 four 7B jobs of 8 GPUs share 12, so their inits take turns on GPUs 0-7. Under
rlix each job first reads its weights into host memory, holding nothing, and its init then
holds the GPUs only to copy them in and set up; under gap-ratio (RLix's pipelines) each init
reads from storage while it holds them. The times are checked against the cost model's
formulas, computed here from its constants.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rlix.runs import load
from rlix.scenarios import load_scenario
from rlix.sim import simulate
from rlix.sim.costs import CostModel


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("prefetch")
    return {policy: load(simulate("blog-4on12", policy, out=out / policy, plots=False).run_dir)
            for policy in ("rlix", "gap-ratio")}


def _costs() -> CostModel:
    scenario = load_scenario("blog-4on12")
    (model,) = {p.model for p in scenario.pipelines}
    return CostModel.for_model(model, scenario.topology_config.gpu, scenario.costs)


def _inits(run: object) -> pd.DataFrame:
    activity = run.activity  # type: ignore[attr-defined]
    inits = activity[(activity["stage"] == "init") & (activity["cluster"] == "actor_train")]
    return inits.groupby("pipeline_id", observed=True).agg(t_start=("t_start", "min"), t_end=("t_end", "max"),
                                                           gpus=("gpu", "nunique"))


def test_rlix_reads_before_it_asks_and_holds_its_gpus_only_for_the_copy(runs: dict[str, object]) -> None:
    costs = _costs()
    read_s = costs.model.weight_bytes / costs.storage_bytes_per_s
    copy_s = costs.model.weight_bytes / 8 / costs.host_link_bytes_per_s
    run = runs["rlix"]
    waits = run.waits  # type: ignore[attr-defined]
    asked = waits[waits["priority"] == 0].set_index("pipeline_id")["t_request"]
    assert asked.to_dict() == pytest.approx({f"job{i}": read_s for i in range(4)})  # all arrive at 0
    inits = _inits(run)
    assert list(inits["t_end"] - inits["t_start"]) == pytest.approx([costs.init_fixed_s + copy_s] * 4)
    assert (inits["gpus"] == 8).all()
    assert inits["t_start"].min() == pytest.approx(read_s)
    summary = run.summary  # type: ignore[attr-defined]
    assert {pid: p["prefetch_s"] for pid, p in summary["pipelines"].items()} == pytest.approx(
        {f"job{i}": read_s for i in range(4)})


def test_gap_ratio_reads_inside_its_hold_and_its_last_init_ends_later(runs: dict[str, object]) -> None:
    costs = _costs()
    read_s = costs.model.weight_bytes / costs.storage_bytes_per_s
    run = runs["gap-ratio"]
    waits = run.waits  # type: ignore[attr-defined]
    assert (waits[waits["priority"] == 0]["t_request"] == 0.0).all()
    inits = _inits(run)
    assert list(inits["t_end"] - inits["t_start"]) == pytest.approx([costs.init_fixed_s + read_s] * 4)
    assert inits["t_start"].min() == 0.0
    assert all(p["prefetch_s"] == 0.0 for p in run.summary["pipelines"].values())  # type: ignore[attr-defined]
    # Four inits in turn: each holds the reads under gap-ratio, only the first read is waited
    # for under rlix (they all read at once, before asking).
    rlix_last, gap_last = _inits(runs["rlix"])["t_end"].max(), inits["t_end"].max()
    assert gap_last >= 4 * (costs.init_fixed_s + read_s)
    assert rlix_last < gap_last - 2 * read_s


def test_a_job_that_waits_for_its_home_reads_its_weights_once_placed(tmp_path: Path) -> None:
    """With at most one 8-GPU home of the 12 running at a time (`max_home_load` 0.7), job1's
    home is placed only when job0 has left; it reads its weights then, not on arrival."""
    base = load_scenario("blog-4on12")
    scenario = base.with_policy("rlix", {**base.policy.config.model_dump(), "max_home_load": 0.7})
    run = load(simulate(scenario, out=tmp_path / "one-at-a-time", plots=False).run_dir)
    costs = _costs()
    read_s = costs.model.weight_bytes / costs.storage_bytes_per_s
    spans = run.allocations.groupby("pipeline_id").agg(first=("t_start", "min"), last=("t_end", "max"))
    waits = run.waits
    asked = waits[waits["priority"] == 0].set_index("pipeline_id")["t_request"]
    assert asked["job0"] == pytest.approx(read_s)
    assert asked["job1"] == pytest.approx(spans.loc["job0", "last"] + read_s)
    assert run.summary["pipelines"]["job1"]["prefetch_s"] == pytest.approx(read_s)
