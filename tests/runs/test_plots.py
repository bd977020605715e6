"""The run plots stay readable with many jobs: past MAX_LEGEND pipelines they are drawn by job
group (the id less a trailing -<n>), one colour, band and box per group."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import pandas as pd

from rlix.policy import ClusterSpec, PipelineKind, PipelineSpec, Topology
from rlix.policy import events as ev
from rlix.runs.frames import RunTables, tables_from_recorder
from rlix.runs.plots import (
    MAX_LEGEND,
    legend_keys,
    pipeline_colours,
    step_times,
    utilization,
    write_plots,
)
from tests.runs.fake_run import driven


def queue_of(names: list[str]) -> RunTables:
    """Jobs that each hold the 2-GPU pool for 10 s in turn, under static."""
    recorder, loop, clock = driven(Topology(1, 2), "static")
    home = (0, 1)
    for i, name in enumerate(names):
        clock.now = 10.0 * i
        spec = PipelineSpec(name, PipelineKind.FULL_FINETUNE,
                            {"actor_train": ClusterSpec(1, home), "actor_infer": ClusterSpec(1, home)}, home=home)
        for event in (ev.PipelineRegistered(clock.now, spec), ev.PipelineAdmitted(clock.now, name),
                      ev.ClusterRequested(clock.now, name, "actor_train", 0)):
            loop.send(event)
        clock.now = 10.0 * i + 10.0
        loop.send(ev.ClusterReleased(clock.now, name, "actor_train"))
        loop.send(ev.PipelineRemoved(clock.now, name))
    recorder.finish(10.0 * len(names))
    return tables_from_recorder(recorder)


def test_few_pipelines_are_drawn_each_on_its_own() -> None:
    names = [f"job-{i}" for i in range(MAX_LEGEND)]
    assert legend_keys(names) == {n: n for n in names}
    assert len(set(pipeline_colours(names).values())) > 1


def test_many_pipelines_are_drawn_by_group() -> None:
    names = [f"{kind}-{i}" for i in range(12) for kind in ("math", "agentic")]
    keys = legend_keys(names)
    assert set(keys.values()) == {"math", "agentic"}
    colours = pipeline_colours(names)
    assert colours["math-0"] == colours["math-11"] != colours["agentic-0"]


def test_a_run_of_many_jobs_draws_one_band_and_box_per_group(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    tables = queue_of([f"{kind}-{i}" for i in range(12) for kind in ("short", "long")])
    colours = pipeline_colours(tables.pipeline_ids)
    figure = Figure()
    utilization(figure, tables, colours)
    assert sorted(t.get_text() for t in figure.axes[0].get_legend().get_texts()) == ["long", "short"]
    figure = Figure()
    steps = pd.DataFrame({"pipeline_id": tables.pipeline_ids, "t_start": 0.0, "t_end": 5.0})
    step_times(figure, dataclasses.replace(tables, steps=steps), colours)
    assert sorted(t.get_text() for t in figure.axes[0].get_xticklabels()) == ["long", "short"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no collapsed layout from a legend of every job
        paths = write_plots(tables, tmp_path)
    assert all(p.stat().st_size > 5_000 for p in paths)
