"""bench/rollout_headroom.py: homes read back from a hand-written event log, a widened scenario
checked field by field, and on real runs the added GPUs used by rollout and nothing else."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rlix.scenarios import load_scenario
from rlix.sim.api import simulate
from tests.bench.bench_module import load


def test_placed_homes_from_the_event_log(tmp_path: Path) -> None:
    bench = load("rollout_headroom")
    path = tmp_path / "events.jsonl"
    lines = [
        {"event": {"type": "PipelineAdmitted", "pipeline_id": "a"}, "decisions": [
            {"type": "AllowRollout", "pipeline_id": "a"},
            {"type": "Place", "pipeline_id": "a", "home": [4, 5, 6, 7], "mappings": {}}]},
        {"event": {"type": "Tick"}, "decisions": []},
        {"event": {"type": "PipelineAdmitted", "pipeline_id": "b"}, "decisions": [
            {"type": "Place", "pipeline_id": "b", "home": [0, 1], "mappings": {}}]},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert bench.placed_homes(path) == {"a": [4, 5, 6, 7], "b": [0, 1]}


def test_widened_pins_sized_homes_and_adds_nodes_rollout_may_use() -> None:
    bench = load("rollout_headroom")
    blog = load_scenario("blog-4on12")
    homes = {f"job{i}": list(range(8)) for i in range(4)}
    wide = bench.widened(blog, homes, 2)
    assert wide.num_gpus == blog.num_gpus + 2 * 4
    for pipeline in wide.pipelines:
        assert pipeline.home_gpus == tuple(range(8))
    # tiny's homes and rollout mappings are GPU lists; its rollout lists cover the whole pool
    tiny = load_scenario("tiny")
    wide = bench.widened(tiny, {}, 1)
    for before, after in zip(tiny.pipelines, wide.pipelines, strict=True):
        assert after.home_gpus == before.home_gpus
        infer = after.model_dump(by_alias=True)["clusters"]["actor_infer"]["gpus"]
        assert sorted(infer) == list(range(8))


def test_widened_refuses_when_no_rollout_could_use_the_added_gpus() -> None:
    bench = load("rollout_headroom")
    tiny = load_scenario("tiny")
    data = tiny.model_dump(by_alias=True, exclude_none=True)
    for pipeline in data["pipelines"]:
        pipeline["clusters"]["actor_infer"]["gpus"] = pipeline["home"]
    narrow = type(tiny).model_validate(data)
    assert bench.widened(narrow, {}, 0).num_gpus == 4  # nothing added: nothing to refuse
    with pytest.raises(ValueError, match="no pipeline's rollout"):
        bench.widened(narrow, {}, 1)
    blog = load_scenario("blog-4on12")
    with pytest.raises(ValueError, match="no home to pin for job3"):
        bench.widened(blog, {f"job{i}": list(range(8)) for i in range(3)}, 1)


def test_added_gpus_run_rollout_only(tmp_path: Path) -> None:
    bench = load("rollout_headroom")
    rows = bench.run_one("blog-4on12", "rlix", 0, (0, 1))
    assert [row["num_gpus"] for row in rows] == [12, 16]
    assert all(row["ceiling_makespan_s"] == rows[0]["ceiling_makespan_s"] for row in rows)
    for row in rows:
        assert 0 <= row["rankless_in_gangs_s"] <= row["rankless_s"] <= 4 * row["makespan_s"]
    # two ranks no gang takes: the jobs wait far less for one (seed 0: 326 -> 13 job-seconds)
    assert rows[1]["rankless_s"] < rows[0]["rankless_s"] / 4
    # the widened study again, with its tables: the added GPUs 12-15 hold rollout ranks and no
    # other stage, and the homes stay on the GPUs the study as it is placed them
    base = simulate("blog-4on12", "rlix", seed=0, out=tmp_path / "base", plots=False)
    homes = bench.placed_homes(base.run_dir / "events.jsonl")
    assert len(homes) == 4
    wide = simulate(bench.widened(load_scenario("blog-4on12"), homes, 1), "rlix",
                    out=tmp_path / "wide", plots=False)
    assert wide.summary["makespan_s"] == pytest.approx(rows[1]["makespan_s"])
    activity = pd.read_parquet(wide.run_dir / "activity.parquet")
    added = activity[activity["gpu"] >= 12]
    assert len(added) > 0
    assert set(added["cluster"]) == {"actor_infer"}
    not_rollout = activity[activity["cluster"] != "actor_infer"]
    assert set(not_rollout["gpu"]) <= {g for gpus in homes.values() for g in gpus}


def test_without_the_ceiling_the_same_runs_and_their_mean_jct() -> None:
    bench = load("rollout_headroom")
    with_ceiling = bench.run_one("tiny", "rlix", 0, (0, 1))
    without = bench.run_one("tiny", "rlix", 0, (0, 1), ceiling=False)
    assert all(row["ceiling_makespan_s"] is None for row in without)
    assert with_ceiling[0]["ceiling_makespan_s"] is not None
    for a, b in zip(with_ceiling, without, strict=True):
        assert a["makespan_s"] == pytest.approx(b["makespan_s"])
        assert a["mean_jct_s"] == pytest.approx(b["mean_jct_s"])
        assert 0 < b["mean_jct_s"] <= b["makespan_s"]
    rows = bench.bench(["tiny"], ["rlix"], (0, 1), 1, 1, quiet=True, ceiling=False)
    assert [row["extra_nodes"] for row in rows] == [0, 1]
    assert all("of_ceiling" not in row and row["mean_jct_s"] > 0 for row in rows)
