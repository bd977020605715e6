"""A sweep's plots: an axis of mappings is plotted by its values' text form, a sweep over
policies alone gets a bar chart a metric, and every line reads the one x axis in the values'
order. No Ray: the rows are made here."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

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


def _drawn_lines(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[tuple[float, str]]]:
    """Each plotted line's (x position, x label) points, kept instead of the file."""
    from matplotlib.figure import Figure

    drawn: dict[str, list[tuple[float, str]]] = {}

    def keep(fig: Figure, path: object, **kwargs: object) -> None:
        ax = fig.axes[0]
        labels = {float(pos): label.get_text() for pos, label in zip(ax.get_xticks(), ax.get_xticklabels(), strict=True)}
        for line in ax.get_lines():
            positions = [float(p) for p in ax.xaxis.convert_units(list(line.get_xdata()))]
            drawn[str(line.get_label())] = [(p, labels.get(p, "?")) for p in positions]

    monkeypatch.setattr(Figure, "savefig", keep)
    return drawn


def test_every_line_reads_one_ordered_x_axis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A value one policy lacks (its point failed) was placed after the values seen first, so
    the other policy's line went 2, 10, then back to 1."""
    drawn = _drawn_lines(monkeypatch)
    rows = pd.DataFrame({
        "point_id": list("abcdef"),
        "policy": ["rlix"] * 3 + ["static"] * 3,
        "costs.load_s": [1, 2, 10] * 2,
        "status": ["failed", "ok", "ok", "ok", "ok", "ok"],
        "overall.steps_per_hour": [None, 2.0, 3.0, 1.0, 2.5, 3.5],
    })
    plot_sweep(rows, ["policy", "costs.load_s"], tmp_path)
    for name, expected in (("static", ["1", "2", "10"]), ("rlix", ["2", "10"])):
        positions, labels = zip(*drawn[name], strict=True)
        assert list(labels) == expected and list(positions) == sorted(positions), name


def test_a_null_value_is_plotted_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An axis value null (a field left unset, `--grid pipelines.*.runtime_estimate_s=null,100`)
    was dropped from the plot."""
    drawn = _drawn_lines(monkeypatch)
    rows = pd.DataFrame({
        "point_id": list("abc"),
        "pipelines.*.runtime_estimate_s": [100.0, None, 50.0],
        "status": ["ok"] * 3,
        "overall.steps_per_hour": [1.0, 2.0, 3.0],
    })
    plot_sweep(rows, ["pipelines.*.runtime_estimate_s"], tmp_path)
    assert [label for _, label in drawn["all"]] == ["50.0", "100.0", "null"]
