"""One figure comparing finished runs (e.g. the same scenario under several policies).

Works from summaries only (`summary.json`), so comparing long runs is instant, and runs of
either driver compare alike. Four panels: steps per hour (with the ceiling, when known, as a
dashed line), how the pool's GPU time was spent (busy, loading weights, idle), mean and p95
step time, and either each pipeline's slowdown against running alone (when given) or the
trajectory attempts preempted. `rlix-sim compare` draws its plot with `plot_summaries`;
`compare_runs` draws any run folders.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlix.runs.reader import load


def compare_runs(run_dirs: Sequence[str | Path], out_png: str | Path,
                 labels: Sequence[str] | None = None) -> Path:
    """Write the comparison of `run_dirs` to `out_png`; bars are labelled by `labels`, by
    default each run's policy (with its folder name when policies repeat)."""
    summaries = [load(d).summary for d in run_dirs]
    names = list(labels) if labels is not None else _default_labels(run_dirs, summaries)
    if len(names) != len(summaries):
        raise ValueError(f"{len(names)} labels for {len(summaries)} runs")
    return plot_summaries(dict(zip(names, summaries, strict=True)), out_png)


def plot_summaries(
    summaries: Mapping[str, dict[str, Any]],
    out_png: str | Path,
    *,
    ceiling: float | None = None,
    slowdowns: Mapping[str, Mapping[str, float]] | None = None,
) -> Path:
    """The figure of runs labelled by the keys of `summaries`. `ceiling`: steps per hour no run
    should pass (drawn dashed); `slowdowns`: per label, each pipeline's mean step time over its
    time alone (replaces the preemption panel)."""
    from matplotlib.figure import Figure

    names = list(summaries)
    overall = [s["overall"] for s in summaries.values()]
    figure = Figure(figsize=(13, 3.8), layout="constrained")
    axes = figure.subplots(1, 4)
    x = np.arange(len(names))
    _bars(axes[0], x, [o["steps_per_hour"] for o in overall], "steps per hour (all pipelines)")
    if ceiling is not None:
        # Room above the line for its label, which at the axes' top ran into the title.
        tallest = max([ceiling, *(o["steps_per_hour"] or 0.0 for o in overall)])
        axes[0].set_ylim(0, tallest * 1.12)
        axes[0].axhline(ceiling, color="black", linestyle="--", linewidth=1.0)
        axes[0].annotate("ceiling", (x[0] - 0.4, ceiling), xytext=(0, 3), textcoords="offset points",
                         fontsize=8)
    bottom = np.zeros(len(x))
    for key, colour, label in (("busy_share", "tab:green", "busy"), ("loading_share", "tab:orange", "loading"),
                               ("idle_share", "0.8", "idle")):
        values = np.array([o[key] or 0.0 for o in overall])
        axes[1].bar(x, values, bottom=bottom, color=colour, label=label)
        bottom += values
    axes[1].set_ylim(0, 1)
    axes[1].set_title("share of GPU time")
    _legend_above_bars(axes[1], 1.0, ncol=3)
    width = 0.4
    mean_step_s = [o["mean_step_time_s"] or 0.0 for o in overall]
    p95_step_s = [o["p95_step_time_s"] or 0.0 for o in overall]
    axes[2].bar(x - width / 2, mean_step_s, width, label="mean")
    axes[2].bar(x + width / 2, p95_step_s, width, label="p95")
    axes[2].set_title("step time (s)")
    _legend_above_bars(axes[2], max([*mean_step_s, *p95_step_s, 0.0]), ncol=2)
    if slowdowns:
        _slowdown_bars(axes[3], names, slowdowns)
    else:
        _bars(axes[3], x, [o["preemptions"] for o in overall], "trajectories preempted")
    for ax in axes[:3] if slowdowns else axes:
        ax.set_xticks(x, names, rotation=30 if len(names) > 3 else 0, ha="right" if len(names) > 3 else "center")
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out_png, dpi=110)
    return out_png


#: Past this many pipelines the slowdown panel has a bar per group of jobs (the id less a
#: trailing `-<n>`, as `rlix-sim jobs` groups them), the mean over its jobs: lab-day-256's 273
#: bars a run, each label on the axis, were a black smear.
MAX_PIPELINE_BARS = 40


def _slowdown_bars(ax: Any, names: list[str], slowdowns: Mapping[str, Mapping[str, float]]) -> None:
    """Pipelines (or, past MAX_PIPELINE_BARS, groups of jobs) along x, one bar per run beside
    each other."""
    pipelines = sorted({pid for per_run in slowdowns.values() for pid in per_run})
    title = "mean step time / alone on home"
    if len(pipelines) > MAX_PIPELINE_BARS:
        slowdowns = {name: _group_means(per_run) for name, per_run in slowdowns.items()}
        pipelines = sorted({group for per_run in slowdowns.values() for group in per_run})
        title += "\n(mean per group of jobs)"
    x = np.arange(len(pipelines))
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        values = [slowdowns.get(name, {}).get(pid, float("nan")) for pid in pipelines]
        ax.bar(x - 0.4 + width * (i + 0.5), values, width, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(x, pipelines, rotation=30 if len(pipelines) > 3 else 0,
                  ha="right" if len(pipelines) > 3 else "center")
    ax.set_title(title)
    tallest = max([v for per_run in slowdowns.values() for v in per_run.values() if v == v] + [1.0])
    _legend_above_bars(ax, tallest, ncol=3)


def _group_means(per_pipeline: Mapping[str, float]) -> dict[str, float]:
    """The mean of each group's values (nulls left out; null if all are)."""
    from rlix.runs.breakdown import group_of

    groups: dict[str, list[float]] = {}
    for pid, value in per_pipeline.items():
        groups.setdefault(group_of(pid), []).append(value)
    return {group: float(np.nanmean(values)) if any(v == v for v in values) else float("nan")
            for group, values in groups.items()}


#: A legend row's height as a share of the bars' height (x-small type on a 3.8-inch figure).
_LEGEND_ROW = 0.11


def _legend_above_bars(ax: Any, tallest: float, ncol: int) -> None:
    """The legend in a band above the tallest bar, the y axis raised to make room for it: a
    legend placed over the bars hid some of them."""
    num_rows = -(-len(ax.get_legend_handles_labels()[1]) // ncol)
    top = tallest * (1.04 + _LEGEND_ROW * num_rows) if tallest > 0 else 1.0
    ax.set_ylim(0, top)
    ax.legend(fontsize="x-small", loc="upper center", ncol=ncol, frameon=False, borderaxespad=0.2)


def _bars(ax: Any, x: np.ndarray, values: list[Any], title: str) -> None:
    ax.bar(x, [v or 0.0 for v in values], color="tab:blue")
    ax.set_title(title)


def _default_labels(run_dirs: Sequence[str | Path], summaries: list[dict[str, Any]]) -> list[str]:
    policies = [str(s["policy"]) for s in summaries]
    if len(set(policies)) == len(policies):
        return policies
    return [f"{p} ({Path(d).name})" for p, d in zip(policies, run_dirs, strict=True)]
