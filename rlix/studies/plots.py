"""A sweep's plots: each metric against each grid axis, one line per policy, seed spread.

For every axis other than `policy` and `seed` (or `seed` itself when it is the only one) and
every metric in `METRICS` that the rows have, one PNG: the axis on x, the metric's mean over
the other axes' values (seeds above all) on y, one line per policy, and a band from the
lowest to the highest value. A sweep over policies alone gets one bar chart a metric: the
mean per policy, the lowest to highest value as an error bar. An axis whose values are not all
of one plain kind (mappings, text and numbers mixed) is plotted by the values' text form.
Failed points are left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from rlix.studies.grid import plain_kind, value_text

METRICS = (
    ("overall.steps_per_hour", "steps per hour"),
    ("overall.idle_share", "idle share"),
    ("overall.busy_share", "busy share"),
    ("overall.jobs.experiments_per_hour", "experiments per hour"),
    ("overall.jobs.mean_jct_s", "mean JCT (s)"),
    ("overall.jobs.p95_queueing_s", "p95 queueing (s)"),
    ("makespan_s", "makespan (s)"),
)


def plot_sweep(rows: pd.DataFrame, axes: list[str], folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = rows[rows["status"] == "ok"].copy()
    xs = [a for a in axes if a not in ("policy", "seed")] or [a for a in axes if a == "seed"] or list(axes)
    by = "policy" if "policy" in ok.columns and xs != ["policy"] else None
    written: list[Path] = []
    if ok.empty:
        return written
    for axis in axes:  # mappings cannot be grouped: their text form can
        if axis in ok.columns and plain_kind(list(ok[axis])) is None:
            ok[axis] = [value_text(v) for v in ok[axis]]
    folder.mkdir(parents=True, exist_ok=True)
    for axis in xs:
        for metric, label in METRICS:
            if metric not in ok.columns or ok[metric].isna().all():
                continue
            fig, ax = plt.subplots(figsize=(6, 4))
            if axis == "policy":
                _bars(ax, ok.groupby(axis, sort=False)[metric].agg(["mean", "min", "max"]))
            else:
                # one x position a value, in order, shared by every line: matplotlib places text
                # in the order first seen, so a value one policy lacks (a failed point) would
                # land after the others and bend that line back
                # null (a field left unset) is a value too: last, where groupby would drop it
                order = sorted(ok[axis].dropna().unique()) + ([None] if ok[axis].isna().any() else [])
                position = {value: i for i, value in enumerate(order)}
                for name, group in ok.groupby(by) if by else [("all", ok)]:
                    stats = group.groupby(axis, dropna=False)[metric].agg(["mean", "min", "max"]).sort_index()
                    x = [position[None if pd.isna(v) else v] for v in stats.index]
                    ax.plot(x, stats["mean"], marker="o", label=str(name))
                    ax.fill_between(x, stats["min"], stats["max"], alpha=0.15)
                ax.set_xticks(range(len(order)), ["null" if v is None else str(v) for v in order])
                ax.legend(title=by or "", fontsize=8)
            ax.set_xlabel(axis)
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
            fig.tight_layout()
            path = folder / f"{metric.replace('.', '_')}_vs_{axis.replace('.', '_').replace('*', 'all')}.png"
            fig.savefig(path, dpi=100)
            plt.close(fig)
            written.append(path)
    return written


def _bars(ax: Any, stats: pd.DataFrame) -> None:
    """One bar a value (a categorical axis alone: policies), the lowest to highest as an error bar."""
    x = [str(v) for v in stats.index]
    errors = [stats["mean"] - stats["min"], stats["max"] - stats["mean"]]
    ax.bar(x, stats["mean"], yerr=errors, capsize=4, alpha=0.8)
