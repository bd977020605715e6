"""A sweep's plots: an axis of mappings is plotted by its values' text form, and a sweep over
policies alone gets a bar chart a metric. No Ray: the rows are made here."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rlix.studies.plots import plot_sweep


def test_an_axis_of_mappings_is_plotted_by_its_text(tmp_path: Path) -> None:
    rows = pd.DataFrame({
        "point_id": ["a", "b", "c", "d"],
        "policy": ["rlix", "rlix", "static", "static"],
        "pipelines.0.clusters.actor_infer": [{"tp": 1, "gpus": "0-3"}, {"tp": 2, "gpus": "0-3"}] * 2,
        "status": ["ok"] * 4,
        "overall.steps_per_hour": [1.0, 2.0, 3.0, 4.0],
    })
    written = plot_sweep(rows, ["policy", "pipelines.0.clusters.actor_infer"], tmp_path)
    assert [p.name for p in written] == ["overall_steps_per_hour_vs_pipelines_0_clusters_actor_infer.png"]


def test_a_sweep_of_policies_alone_gets_bars(tmp_path: Path) -> None:
    rows = pd.DataFrame({
        "point_id": ["a", "b", "c"],
        "policy": ["rlix", "static", "gap-ratio"],
        "status": ["ok"] * 3,
        "overall.steps_per_hour": [1.0, 2.0, 3.0],
        "makespan_s": [10.0, 20.0, 30.0],
    })
    written = plot_sweep(rows, ["policy"], tmp_path)
    assert sorted(p.name for p in written) == ["makespan_s_vs_policy.png", "overall_steps_per_hour_vs_policy.png"]
    assert all(p.stat().st_size > 0 for p in written)
