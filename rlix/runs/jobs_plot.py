"""The job plot of a comparison: each policy's JCT CDF, and its queue length over time.

Both from the per-pipeline job figures of each policy's summary.json (rlix.runs.jobs): the CDF
of `jct_s` over the jobs that finished, and the number of jobs that had arrived but not yet
started (`arrival_s` <= t < `start_s`) as a step function of time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def queue_length(pipelines: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(times, jobs waiting from each time on): +1 at each arrival, -1 at each start."""
    changes: list[tuple[float, int]] = []
    for figures in pipelines.values():
        arrival, start = figures.get("arrival_s"), figures.get("start_s")
        if arrival is None:
            continue
        changes.append((float(arrival), 1))
        if start is not None:
            changes.append((float(start), -1))
    if not changes:
        return np.zeros(1), np.zeros(1)
    changes.sort(key=lambda change: (change[0], -change[1]))  # an arrival before a start at one time
    times = np.array([t for t, _ in changes])
    waiting = np.cumsum([d for _, d in changes])
    return times, waiting


def plot_jobs(summaries: dict[str, dict[str, Any]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (cdf, queue) = plt.subplots(1, 2, figsize=(12, 4.5))
    for policy, summary in summaries.items():
        pipelines = summary.get("pipelines", {})
        jcts = np.sort([f["jct_s"] for f in pipelines.values() if f.get("jct_s") is not None])
        if len(jcts):
            cdf.step(jcts / 60.0, np.arange(1, len(jcts) + 1) / len(jcts), where="post", label=policy)
        times, waiting = queue_length(pipelines)
        queue.step(times / 3600.0, waiting, where="post", label=policy)
    cdf.set_xlabel("job completion time (min)")
    cdf.set_ylabel("share of jobs finished within")
    cdf.set_title("JCT CDF")
    queue.set_xlabel("time (h)")
    queue.set_ylabel("jobs waiting to start")
    queue.set_title("queue length")
    for ax in (cdf, queue):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
