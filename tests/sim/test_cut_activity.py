"""A run cut by its time limit (`max_time_s`, `--duration-s`) while stages and weight loads go
on still shows those GPUs at work up to the cut: the activity table, and the busy and loading
shares from it, held only spans that had ended, so a cut during a 60-s init read as 100% idle."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rlix.sim import simulate
from rlix.sim.api import resolve_scenario


def _run(max_time_s: float, tmp_path: Path, streamed: bool) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    scenario = resolve_scenario("tiny", max_time_s=max_time_s)
    tables = ["allocations", "activity", "steps"] if streamed else None
    result = simulate(scenario, out=tmp_path / "run", tables=tables, plots=False)
    folder = result.run_dir
    return (result.summary, pd.read_parquet(folder / "activity.parquet"),
            pd.read_parquet(folder / "allocations.parquet"))


@pytest.mark.parametrize("streamed", [False, True], ids=["in-memory", "streamed"])
def test_a_stage_going_on_at_the_cut_is_busy_up_to_it(tmp_path: Path, streamed: bool) -> None:
    summary, activity, allocations = _run(60.0, tmp_path, streamed)
    # tiny's inits hold all four GPUs from their weights' read until past 60 s.
    inits = allocations[(allocations.priority == 0) & (allocations.t_end == 60.0)]
    assert sorted(inits.gpu) == [0, 1, 2, 3]
    for row in inits.itertuples():
        spans = activity[(activity.gpu == row.gpu) & (activity.stage == "init")]
        assert (spans.t_start.min(), spans.t_end.max()) == (row.t_start, 60.0)
    busy_gpu_s = (activity.t_end - activity.t_start)[activity.kind == "busy"].sum()
    assert summary["overall"]["busy_share"] == pytest.approx(busy_gpu_s / (4 * 60.0))
    assert summary["overall"]["busy_share"] > 0.95


def test_a_weight_load_going_on_at_the_cut_is_loading_up_to_it(tmp_path: Path) -> None:
    _, activity, allocations = _run(62.0, tmp_path, streamed=False)
    ranks = allocations[(allocations.cluster == "actor_infer") & (allocations.t_end == 62.0)]
    assert len(ranks) == 4  # every rollout rank began loading at 61.6 s and is still at it
    for row in ranks.itertuples():
        spans = activity[(activity.gpu == row.gpu) & (activity.t_start >= row.t_start)]
        assert list(spans.stage) == ["load"] and spans.t_end.max() == 62.0
