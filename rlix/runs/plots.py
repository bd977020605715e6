"""The PNG plots of a run folder: per-GPU Gantt chart, GPU use over time, step-time spread.

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no global backend switch), so
it is safe in notebooks and headless runs. Large runs stay fast: the Gantt chart joins bars
closer than a pixel-ish gap until at most `MAX_BARS` remain, and the time plots integrate
exact GPU-seconds into `NUM_BINS` time bins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rlix.runs.frames import RunTables
from rlix.runs.intervals import merge, per_bin
from rlix.runs.metrics import gpu_cover

MAX_BARS = 4000
NUM_BINS = 300
PLOT_FILES = ("gantt.png", "utilization.png", "step_times.png")
#: Activity classes drawn in the Gantt chart, each in its own shade of the pipeline's colour.
CLASSES = ("rollout", "compute", "loading")


def write_plots(tables: RunTables, out_dir: str | Path) -> list[Path]:
    """Write every plot of PLOT_FILES into `out_dir`; return their paths."""
    from matplotlib.figure import Figure  # the `sim` extra; only plotting needs it

    out_dir = Path(out_dir)
    colours = pipeline_colours(tables.pipeline_ids)
    paths = []
    for name, draw in zip(PLOT_FILES, (gantt, utilization, step_times), strict=True):
        figure = Figure(figsize=(11, 4), layout="constrained")
        draw(figure, tables, colours)
        path = out_dir / name
        figure.savefig(path, dpi=110)
        paths.append(path)
    return paths


def pipeline_colours(pipeline_ids: list[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    palette = colormaps["tab10" if len(pipeline_ids) <= 10 else "tab20"]
    return {pid: palette(i % palette.N) for i, pid in enumerate(pipeline_ids)}


def gantt(figure: Any, tables: RunTables, colours: dict[str, Any]) -> None:
    """One row per GPU: holdings in a light shade of their pipeline's colour; on top, rollout
    (solid), other stages (hatched) and weight loads (dark, thin)."""
    from matplotlib.patches import Patch

    num_gpus, pids = max(tables.num_gpus, 1), tables.pipeline_ids
    figure.set_size_inches(11, min(2.0 + 0.22 * num_gpus, 14.0))
    ax = figure.add_subplot()
    alloc, act = tables.allocations, tables.activity
    code = {pid: i for i, pid in enumerate(pids)}
    kind = act["kind"].to_numpy(object)
    stage = act["stage"].to_numpy(object)
    act_class = np.where(kind == "loading", 2, np.where(stage == "rollout", 0, 1))
    layers = [
        (alloc, np.full(len(alloc), -1)),
        (act, act_class),
    ]
    budget = MAX_BARS // 2
    for frame, classes in layers:
        owner = frame["pipeline_id"].map(code).to_numpy(np.int64)
        keys = ((owner * 4 + classes + 1) * num_gpus + frame["gpu"].to_numpy(np.int64))
        k, s, e = _within_budget(keys, frame["t_start"].to_numpy(float), frame["t_end"].to_numpy(float),
                                 budget, tables.makespan_s)
        gpu, rest = k % num_gpus, k // num_gpus
        for group in np.unique(rest):
            pid, cls = pids[group // 4], group % 4 - 1
            mask = rest == group
            style = _bar_style(cls, colours[pid])
            height = 0.3 if cls == 2 else 0.8
            for g in np.unique(gpu[mask]):
                on = mask & (gpu == g)
                ax.broken_barh(list(zip(s[on], e[on] - s[on], strict=True)), (g - height / 2, height), **style)
    ax.set_ylim(num_gpus - 0.5, -0.5)
    ax.set_xlim(0, max(tables.makespan_s, 1e-9))
    if num_gpus <= 32:
        ax.set_yticks(range(num_gpus))
    ax.set_xlabel("time (s)")
    ax.set_ylabel("GPU")
    ax.set_title(f"GPU holdings and work ({tables.policy}, {num_gpus} GPUs)")
    handles = [Patch(color=colours[p], label=p) for p in pids[:20]]
    handles += [Patch(facecolor="white", edgecolor="black", hatch="///", label="train/log-probs"),
                Patch(color="0.15", label="weight load")]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")


def _bar_style(cls: int, colour: Any) -> dict[str, Any]:
    if cls == -1:
        return {"facecolors": colour, "alpha": 0.25, "linewidth": 0}
    if cls == 0:
        return {"facecolors": colour, "linewidth": 0}
    if cls == 1:
        return {"facecolors": colour, "edgecolor": "black", "hatch": "///", "linewidth": 0}
    return {"facecolors": "0.15", "linewidth": 0}


def _within_budget(keys: np.ndarray, starts: np.ndarray, ends: np.ndarray, budget: int,
                   span_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bars of each key joined across gaps of about a pixel, wider gaps until `budget` is met."""
    gap = span_s / 2000.0
    k, s, e = merge(keys, starts, ends, gap)
    while len(k) > budget and gap < span_s:
        gap *= 2.0
        k, s, e = merge(k, s, e, gap)
    return k, s, e


def utilization(figure: Any, tables: RunTables, colours: dict[str, Any]) -> None:
    """Top: GPUs held per pipeline over time. Bottom: share of the pool busy, loading, idle."""
    figure.set_size_inches(11, 6)
    held_ax, share_ax = figure.subplots(2, 1, sharex=True)
    pids = tables.pipeline_ids
    span = max(tables.makespan_s, 1e-9)
    edges = np.linspace(0.0, span, NUM_BINS + 1)
    width = edges[1] - edges[0]
    cover = gpu_cover(tables, pids)
    seg = cover.segments
    held = [_steps(per_bin(seg.t0[m], seg.t1[m], edges) / width)
            for m in (cover.held & (cover.owner == i) for i in range(len(pids)))]
    if pids:
        held_ax.stackplot(edges, held, labels=pids, colors=[colours[p] for p in pids], linewidth=0,
                          step="post")
        held_ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    held_ax.set_ylim(0, max(tables.num_gpus, 1))
    held_ax.set_ylabel("GPUs held")
    pool = width * max(tables.num_gpus, 1)
    busy = per_bin(seg.t0[cover.busy], seg.t1[cover.busy], edges) / pool
    loading = per_bin(seg.t0[cover.loading], seg.t1[cover.loading], edges) / pool
    held_idle = per_bin(seg.t0[cover.held], seg.t1[cover.held], edges) / pool - busy - loading
    share_ax.stackplot(edges, _steps(busy), _steps(loading), _steps(np.clip(held_idle, 0, None)),
                       labels=["busy", "loading weights", "held, idle"],
                       colors=["tab:green", "tab:orange", "0.8"], linewidth=0, step="post")
    share_ax.set_ylim(0, 1)
    share_ax.set_xlim(0, span)
    share_ax.set_ylabel("share of GPUs")
    share_ax.set_xlabel("time (s)")
    share_ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    held_ax.set_title(f"GPU use over time ({tables.policy}, {tables.num_gpus} GPUs)")


def _steps(per_bin_values: np.ndarray) -> np.ndarray:
    """Bin values at every edge (the last repeated), for a post-step stack plot over the edges."""
    return np.append(per_bin_values, per_bin_values[-1:])


def step_times(figure: Any, tables: RunTables, colours: dict[str, Any]) -> None:
    """Step time (t_end - t_start) per pipeline: box and whiskers, with the steps as dots."""
    ax = figure.add_subplot()
    steps = tables.steps
    durations = (steps["t_end"] - steps["t_start"]).to_numpy(float)
    owners = steps["pipeline_id"].to_numpy(object)
    pids = [p for p in tables.pipeline_ids if (owners == p).any()]
    data = [durations[owners == p] for p in pids]
    if pids:
        ax.boxplot(data, tick_labels=pids, showfliers=False)
        jitter = np.random.default_rng(0)  # fixed seed: the same run draws the same picture
        for i, (pid, values) in enumerate(zip(pids, data, strict=True), start=1):
            shown = values if len(values) <= 2000 else values[:: len(values) // 2000 + 1]
            ax.scatter(i + jitter.uniform(-0.15, 0.15, len(shown)), shown, s=8, color=colours[pid], alpha=0.7)
        if len(pids) > 8:
            ax.tick_params(axis="x", labelrotation=60)
    else:
        ax.text(0.5, 0.5, "no finished steps", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("step time (s)")
    ax.set_title("Step time per pipeline")
