"""A sweep's plots: each metric against each grid axis, one line per policy, seed spread.

For every axis other than `policy` and `seed` (or `seed` itself when it is the only one) and
every metric in `METRICS` that the rows have, one PNG: the axis on x, the metric's mean over
the other axes' values (seeds above all) on y, one line per policy, and a band from the
lowest to the highest value. Failed points are left out.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

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

    ok = rows[rows["status"] == "ok"]
    xs = [a for a in axes if a not in ("policy", "seed")] or [a for a in axes if a == "seed"]
    by = "policy" if "policy" in ok.columns else None
    written: list[Path] = []
    if ok.empty:
        return written
    folder.mkdir(parents=True, exist_ok=True)
    for axis in xs:
        for metric, label in METRICS:
            if metric not in ok.columns or ok[metric].isna().all():
                continue
            fig, ax = plt.subplots(figsize=(6, 4))
            groups = ok.groupby(by) if by else [("all", ok)]
            for name, group in groups:
                stats = group.groupby(axis)[metric].agg(["mean", "min", "max"]).sort_index()
                x = [str(v) for v in stats.index]
                ax.plot(x, stats["mean"], marker="o", label=str(name))
                ax.fill_between(x, stats["min"], stats["max"], alpha=0.15)
            ax.set_xlabel(axis)
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
            ax.legend(title=by or "", fontsize=8)
            fig.tight_layout()
            path = folder / f"{metric.replace('.', '_')}_vs_{axis.replace('.', '_').replace('*', 'all')}.png"
            fig.savefig(path, dpi=100)
            plt.close(fig)
            written.append(path)
    return written
