"""One figure comparing finished runs (e.g. the same scenario under several policies).

Reads only each folder's `summary.json`, so comparing long runs is instant. Four panels: steps
per hour, how the pool's GPU time was spent (busy, loading weights, idle), mean and p95 step
time, and trajectory attempts preempted.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlix.runs.reader import load


def compare_runs(run_dirs: Sequence[str | Path], out_png: str | Path,
                 labels: Sequence[str] | None = None) -> Path:
    """Write the comparison of `run_dirs` to `out_png`; bars are labelled by `labels`, by
    default each run's policy (with its folder name when policies repeat)."""
    from matplotlib.figure import Figure

    summaries = [load(d).summary for d in run_dirs]
    names = list(labels) if labels is not None else _default_labels(run_dirs, summaries)
    if len(names) != len(summaries):
        raise ValueError(f"{len(names)} labels for {len(summaries)} runs")
    figure = Figure(figsize=(12, 3.6), layout="constrained")
    axes = figure.subplots(1, 4)
    x = np.arange(len(summaries))
    overall = [s["overall"] for s in summaries]
    _bars(axes[0], x, [o["steps_per_hour"] for o in overall], "steps per hour")
    bottom = np.zeros(len(x))
    for key, colour, label in (("busy_share", "tab:green", "busy"), ("loading_share", "tab:orange", "loading"),
                               ("idle_share", "0.8", "idle")):
        values = np.array([o[key] or 0.0 for o in overall])
        axes[1].bar(x, values, bottom=bottom, color=colour, label=label)
        bottom += values
    axes[1].set_ylim(0, 1)
    axes[1].set_title("share of GPU time")
    axes[1].legend(fontsize="small", loc="lower right")
    width = 0.4
    axes[2].bar(x - width / 2, [o["mean_step_time_s"] or 0.0 for o in overall], width, label="mean")
    axes[2].bar(x + width / 2, [o["p95_step_time_s"] or 0.0 for o in overall], width, label="p95")
    axes[2].set_title("step time (s)")
    axes[2].legend(fontsize="small")
    _bars(axes[3], x, [o["preemptions"] for o in overall], "trajectories preempted")
    for ax in axes:
        ax.set_xticks(x, names, rotation=30 if len(names) > 3 else 0, ha="right" if len(names) > 3 else "center")
    out_png = Path(out_png)
    figure.savefig(out_png, dpi=110)
    return out_png


def _bars(ax: Any, x: np.ndarray, values: list[Any], title: str) -> None:
    ax.bar(x, [v or 0.0 for v in values], color="tab:blue")
    ax.set_title(title)


def _default_labels(run_dirs: Sequence[str | Path], summaries: list[dict[str, Any]]) -> list[str]:
    policies = [str(s["policy"]) for s in summaries]
    if len(set(policies)) == len(policies):
        return policies
    return [f"{p} ({Path(d).name})" for p, d in zip(policies, run_dirs, strict=True)]
