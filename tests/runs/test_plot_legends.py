"""The comparison plots keep their legends off the data: compare.png's legends sit in a band
above the tallest bar (placed over the bars, they hid some of them), and jobs.png reads its
time axes in units that suit their range (a 3-minute run's queue was drawn in hours, 0-0.03 h)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlix.runs.jobs_plot import time_unit


def _summary(busy: float, mean_step_s: float, p95_step_s: float) -> dict[str, Any]:
    return {"overall": {"steps_per_hour": 300.0, "busy_share": busy, "loading_share": 0.1,
                        "idle_share": 0.9 - busy, "mean_step_time_s": mean_step_s, "p95_step_time_s": p95_step_s,
                        "preemptions": 3}}


#: `rlix-sim demo`'s five policies on tiny (a busy share near 1, step times near each other),
#: then two runs whose p95 step is far above the rest.
CASES = [
    {"rlix": _summary(0.73, 13.3, 18.4), "gap-ratio": _summary(0.72, 14.7, 19.2), "static": _summary(0.77, 15.1, 19.5),
     "static-backfill": _summary(0.77, 15.1, 19.5), "sequential": _summary(0.46, 10.5, 15.0)},
    {"rlix": _summary(0.85, 5.0, 40.0), "static": _summary(0.60, 30.0, 31.0)},
]


@pytest.mark.parametrize("summaries", CASES)
def test_no_legend_covers_a_bar(summaries: dict[str, Any], tmp_path: Path, saved_figures: list[Any]) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.patches import Rectangle

    from rlix.runs.compare_plot import plot_summaries

    slowdowns = {name: {"ft": 1.0 + 0.05 * i, "lora": 0.8 + 0.1 * i} for i, name in enumerate(summaries)}
    plot_summaries(summaries, tmp_path / "c.png", ceiling=320.0, slowdowns=slowdowns)
    (figure,) = saved_figures
    figure.set_dpi(110)  # as saved
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    renderer = canvas.get_renderer()
    legends = [ax for ax in figure.axes if ax.get_legend() is not None]
    assert len(legends) == 3  # GPU time, step time, slowdowns
    for ax in legends:
        box = ax.get_legend().get_window_extent(renderer)
        assert box.y1 <= ax.get_window_extent(renderer).y1 + 0.5  # inside the panel
        bars = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_height() > 0]
        assert bars
        for bar in bars:
            assert not box.overlaps(bar.get_window_extent(renderer)), (ax.get_title(), bar.get_height())


@pytest.mark.parametrize(("max_s", "unit"), [(0.0, "s"), (185.0, "s"), (600.0, "s"), (601.0, "min"),
                                              (5_400.0, "min"), (36_000.0, "min"), (90_000.0, "h")])
def test_time_units_suit_the_range(max_s: float, unit: str) -> None:
    seconds, name = time_unit(max_s)
    assert name == unit
    assert max_s / seconds <= 600.0 or name == "h"
    assert np.isclose(seconds, {"s": 1.0, "min": 60.0, "h": 3600.0}[name])


def test_jobs_plot_labels_its_axes_in_the_chosen_units(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.pyplot as plt

    from rlix.runs.jobs_plot import plot_jobs

    kept: list[Any] = []
    monkeypatch.setattr(plt, "close", kept.append)
    short = {"pipelines": {"a": {"arrival_s": 0.0, "start_s": 2.0, "jct_s": 100.0},
                           "b": {"arrival_s": 0.0, "start_s": 105.0, "jct_s": 185.0}}}
    plot_jobs({"rlix": short}, tmp_path / "jobs.png")
    cdf, queue = kept[0].axes
    assert cdf.get_xlabel() == "job completion time (s)" and queue.get_xlabel() == "time (s)"
    assert cdf.get_xlim()[1] > 150  # in seconds, not minutes
    day = {"pipelines": {"a": {"arrival_s": 0.0, "start_s": 50_000.0, "jct_s": 4_000.0}}}
    plot_jobs({"rlix": day}, tmp_path / "jobs2.png")
    cdf, queue = kept[1].axes
    assert cdf.get_xlabel() == "job completion time (min)" and queue.get_xlabel() == "time (h)"


def test_the_slowdown_panel_of_many_jobs_has_a_bar_per_group(tmp_path: Path, saved_figures: list[Any]) -> None:
    """A stream of jobs (lab-day-256: 273) gets a slowdown bar per template and run, the mean
    over its jobs, labelled by template, not a bar and an unreadable label per job."""
    from rlix.runs.compare_plot import MAX_PIPELINE_BARS, plot_summaries

    ids = [f"math-{n}" for n in range(MAX_PIPELINE_BARS)] + ["lora-0", "lora-1"]
    slowdowns = {"rlix": {pid: 1.0 + (n % 2) * 0.2 for n, pid in enumerate(ids)},
                 "static": {pid: 2.0 for pid in ids}}
    summaries = {"rlix": _summary(0.8, 10.0, 20.0), "static": _summary(0.6, 12.0, 22.0)}
    plot_summaries(summaries, tmp_path / "c.png", slowdowns=slowdowns)
    (figure,) = saved_figures
    panel = figure.axes[3]
    assert [label.get_text() for label in panel.get_xticklabels()] == ["lora", "math"]
    heights = sorted(round(bar.get_height(), 6) for bar in panel.patches)
    assert heights == [1.1, 1.1, 2.0, 2.0]
