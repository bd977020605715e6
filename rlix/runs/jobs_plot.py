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


def time_unit(max_s: float) -> tuple[float, str]:
    """(seconds per unit, its name) for an axis whose values reach `max_s` seconds: seconds up
    to 10 minutes, minutes up to 10 hours, hours beyond, so ticks read as small round numbers
    (a 3-minute run's queue drawn in hours read 0-0.03 h)."""
    if max_s <= 600.0:
        return 1.0, "s"
    if max_s <= 36_000.0:
        return 60.0, "min"
    return 3600.0, "h"


def plot_jobs(summaries: dict[str, dict[str, Any]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (cdf, queue) = plt.subplots(1, 2, figsize=(12, 4.5))
    jcts_of = {policy: np.sort([f["jct_s"] for f in summary.get("pipelines", {}).values()
                                if f.get("jct_s") is not None]) for policy, summary in summaries.items()}
    queues_of = {policy: queue_length(summary.get("pipelines", {})) for policy, summary in summaries.items()}
    jct_unit_s, jct_unit = time_unit(max((float(j[-1]) for j in jcts_of.values() if len(j)), default=0.0))
    time_unit_s, time_name = time_unit(max(float(times[-1]) for times, _waiting in queues_of.values()))
    for policy in summaries:
        jcts = jcts_of[policy]
        if len(jcts):
            cdf.step(jcts / jct_unit_s, np.arange(1, len(jcts) + 1) / len(jcts), where="post", label=policy)
        times, waiting = queues_of[policy]
        queue.step(times / time_unit_s, waiting, where="post", label=policy)
    cdf.set_xlabel(f"job completion time ({jct_unit})")
    cdf.set_ylabel("share of jobs finished within")
    cdf.set_title("JCT CDF")
    queue.set_xlabel(f"time ({time_name})")
    queue.set_ylabel("jobs waiting to start")
    queue.set_title("queue length")
    for ax in (cdf, queue):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
