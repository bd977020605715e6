"""The comparison plot's ceiling line has room for its label inside the steps-per-hour panel:
with the ceiling at the panel's top (the usual case: no policy passes it) the label ran into
the panel's title."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def _summary(steps_per_hour: float) -> dict[str, Any]:
    return {"overall": {"steps_per_hour": steps_per_hour, "busy_share": 0.7, "loading_share": 0.1,
                        "idle_share": 0.2, "mean_step_time_s": 10.0, "p95_step_time_s": 12.0,
                        "preemptions": 3}}


#: `rlix-sim demo`'s five policies on tiny (their names rotated under the bars) and its ceiling;
#: then a run above the ceiling.
CASES = [((306.41, 296.38, 309.10, 309.10, 171.35), 322.32), ((50.0, 40.0), 45.0)]


@pytest.mark.parametrize(("bars", "ceiling"), CASES)
def test_the_ceiling_label_is_inside_the_panel(
    bars: tuple[float, ...], ceiling: float, tmp_path: Path, saved_figures: list[Any]
) -> None:

    from rlix.runs.compare_plot import plot_summaries

    names = ["rlix", "gap-ratio", "static", "static-backfill", "sequential"][:len(bars)]
    plot_summaries({name: _summary(v) for name, v in zip(names, bars, strict=True)}, tmp_path / "c.png",
                   ceiling=ceiling)
    (figure,) = saved_figures
    panel = figure.axes[0]
    label = next(text for text in panel.texts if text.get_text() == "ceiling")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figure.set_dpi(110)  # as saved
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    renderer = canvas.get_renderer()
    assert label.get_window_extent(renderer).y1 < panel.get_window_extent(renderer).y1
    assert label.get_window_extent(renderer).y1 < panel.title.get_window_extent(renderer).y0
    assert panel.get_ylim()[1] > max(ceiling, *bars)
