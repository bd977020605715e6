"""The PNG plots of a run folder: per-GPU Gantt chart, GPU use over time, step-time spread.

A run of more than `MAX_LEGEND` pipelines (a day of a lab's jobs) is drawn by job group, the
id less a trailing `-<n>` (rlix.runs.breakdown.group_of: a stream's jobs of one template share
a colour, a stack band and a box), so its legend and its boxes stay readable.

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no global backend switch), so
it is safe in notebooks and headless runs. Large runs stay fast: the Gantt chart is one image
sampled at about one instant per pixel column and GPU (not one bar per holding: tens of
thousands of bars take minutes to draw), and the time plots integrate exact GPU-seconds into
`NUM_BINS` time bins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rlix.runs.breakdown import group_of
from rlix.runs.frames import RunTables
from rlix.runs.intervals import merge, per_bin
from rlix.runs.metrics import gpu_cover

NUM_BINS = 300
MAX_LEGEND = 20
PLOT_FILES = ("gantt.png", "utilization.png", "step_times.png")


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


def legend_keys(pipeline_ids: list[str]) -> dict[str, str]:
    """What each pipeline is drawn as: itself, or its job group once there are more than
    MAX_LEGEND pipelines."""
    if len(pipeline_ids) <= MAX_LEGEND:
        return {pid: pid for pid in pipeline_ids}
    return {pid: group_of(pid) for pid in pipeline_ids}


def first_of_each(keys: dict[str, str]) -> dict[str, str]:
    """Each legend key's first pipeline, keys in order of first use."""
    firsts: dict[str, str] = {}
    for pid, key in keys.items():
        firsts.setdefault(key, pid)
    return firsts


def pipeline_colours(pipeline_ids: list[str]) -> dict[str, Any]:
    """A colour per pipeline: one per legend key (`legend_keys`), in order of first use."""
    from matplotlib import colormaps

    keys = legend_keys(pipeline_ids)
    firsts = first_of_each(keys)
    palette = colormaps["tab10" if len(firsts) <= 10 else "tab20"]
    by_key = {key: palette(i % palette.N) for i, key in enumerate(firsts)}
    return {pid: by_key[key] for pid, key in keys.items()}


def gantt(figure: Any, tables: RunTables, colours: dict[str, Any]) -> None:
    """One row per GPU: the holder's colour, solid while it rolls out, darker while it runs
    another stage, near-black while it loads weights, a light tint while it holds the GPU idle;
    white when nobody holds it. Drawn as an image sampled at `gantt_samples` instants, so a
    span shorter than the spacing of the samples may not show."""
    from matplotlib.patches import Patch

    num_gpus, pids = max(tables.num_gpus, 1), tables.pipeline_ids
    figure.set_size_inches(11, min(2.0 + 0.22 * num_gpus, 14.0))
    ax = figure.add_subplot()
    span = max(tables.makespan_s, 1e-9)
    num_samples = gantt_samples(num_gpus)
    times = (np.arange(num_samples) + 0.5) * (span / num_samples)
    cover = gpu_cover(tables, pids)
    seg = cover.segments
    # What each held segment was: 0 idle, 1 rollout, 2 another stage, 3 loading weights.
    state = np.select([cover.busy, cover.loading], [1, 3], default=0)
    held = np.flatnonzero(cover.held)
    hit = _cover_index(cover.gpu[held], seg.t0[held], seg.t1[held], num_gpus, times)
    found = hit >= 0
    segment = held[hit[found]]
    kind = state[segment]
    activity = tables.activity
    rollout = activity[(activity["stage"] == "rollout").fillna(False).to_numpy(bool)]
    r_gpu, r_t0, r_t1 = merge(rollout["gpu"].to_numpy(np.int64), rollout["t_start"].to_numpy(float),
                              rollout["t_end"].to_numpy(float))
    in_rollout = _cover_index(r_gpu, r_t0, r_t1, num_gpus, times)[found] >= 0
    kind = np.where((kind == 1) & ~in_rollout, 2, kind)
    palette = np.array([colours[p][:3] for p in pids] or [(0.0, 0.0, 0.0)])
    colour_weight = np.array([0.3, 1.0, 0.6, 0.0])[kind, None]
    white_weight = np.array([0.7, 0.0, 0.0, 0.15])[kind, None]
    image = np.ones((num_gpus * num_samples, 3), dtype=np.float32)
    image[found] = palette[cover.owner[segment]] * colour_weight + white_weight
    ax.imshow(image.reshape(num_gpus, num_samples, 3), aspect="auto", interpolation="nearest",
              extent=(0.0, span, num_gpus - 0.5, -0.5))
    if num_gpus <= 64:
        ax.hlines(np.arange(num_gpus - 1) + 0.5, 0.0, span, colors="white", linewidth=1.5)
    if num_gpus <= 32:
        ax.set_yticks(range(num_gpus))
    ax.set_xlim(0, span)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("GPU")
    ax.set_title(f"GPU holdings and work ({tables.policy}, {num_gpus} GPUs)")
    firsts = first_of_each(legend_keys(pids))
    handles = [Patch(color=colours[pid], label=key) for key, pid in firsts.items()][:MAX_LEGEND]
    handles += [Patch(color=(0.4, 0.4, 0.4), label="other stage (darker)"),
                Patch(color=(0.15, 0.15, 0.15), label="weight load"),
                Patch(color=(0.85, 0.85, 0.85), label="held, idle (light)")]
    handles += _checkpoint_marks(ax, tables, colours)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")


def _checkpoint_marks(ax: Any, tables: RunTables, colours: dict[str, Any]) -> list[Any]:
    """A checkpoint holds no GPU (it writes host copies): a bar along the top edge, in its
    pipeline's colour, from its start to its end (just before the step's publish)."""
    from matplotlib.lines import Line2D

    steps = tables.steps
    if "checkpoint_s" not in steps.columns:
        return []
    done = steps[steps["checkpoint_s"] > 0]
    for row in done.itertuples():
        end = row.t_end - row.sync_s
        ax.plot([end - row.checkpoint_s, end], [-0.5, -0.5], color=colours[row.pipeline_id], linewidth=6,
                solid_capstyle="butt", clip_on=False)
        ax.plot([end], [-0.5], marker="v", color=colours[row.pipeline_id], markersize=5, clip_on=False)
    return [Line2D([], [], color="0.3", marker="v", linewidth=0, label="checkpoint (top edge)")] if len(done) else []


def gantt_samples(num_gpus: int) -> int:
    """Instants per GPU row: about one per pixel of the plot's width (drawn without smoothing,
    so rows stay sharp), fewer for thousands of GPUs (at most ~4M samples)."""
    return int(min(1200, max(300, 4_000_000 // num_gpus)))


def _cover_index(gpus: np.ndarray, t0: np.ndarray, t1: np.ndarray, num_gpus: int,
                 times: np.ndarray) -> np.ndarray:
    """For every (GPU, instant), GPU-major, the index of the interval covering it, or -1.

    The intervals of one GPU must not overlap (holdings never do; merge others first).
    """
    num_queries = num_gpus * len(times)
    if len(gpus) == 0:
        return np.full(num_queries, -1, dtype=np.int64)
    # One sorted axis for all GPUs: GPU g's time t sits at g * stride + t.
    stride = float(max(t1.max(), times[-1])) + 1.0
    order = np.lexsort((t0, gpus))
    positions = gpus[order] * stride + t0[order]
    query_gpu = np.repeat(np.arange(num_gpus), len(times))
    query_time = np.tile(times, num_gpus)
    at = np.searchsorted(positions, query_gpu * stride + query_time, side="right") - 1
    index = order[np.maximum(at, 0)]
    inside = (at >= 0) & (gpus[index] == query_gpu) & (query_time < t1[index])
    return np.where(inside, index, -1)


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
    keys = legend_keys(pids)
    firsts = first_of_each(keys)
    bands = list(firsts)
    band_of = np.array([bands.index(keys[p]) for p in pids] or [0])
    held = [_steps(per_bin(seg.t0[m], seg.t1[m], edges) / width)
            for m in (cover.held & (band_of[cover.owner] == i) for i in range(len(bands)))]
    if pids:
        held_ax.stackplot(edges, held, labels=bands, colors=[colours[firsts[b]] for b in bands], linewidth=0,
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
    keys = legend_keys(tables.pipeline_ids)
    owners = steps["pipeline_id"].map(keys).to_numpy(object)
    firsts = first_of_each(keys)
    pids = [key for key in firsts if (owners == key).any()]  # a box per legend key
    box_colours = {key: colours[firsts[key]] for key in pids}
    data = [durations[owners == p] for p in pids]
    if pids:
        ax.boxplot(data, tick_labels=pids, showfliers=False)
        jitter = np.random.default_rng(0)  # fixed seed: the same run draws the same picture
        for i, (pid, values) in enumerate(zip(pids, data, strict=True), start=1):
            shown = values if len(values) <= 2000 else values[:: len(values) // 2000 + 1]
            ax.scatter(i + jitter.uniform(-0.15, 0.15, len(shown)), shown, s=8, color=box_colours[pid], alpha=0.7)
        if len(pids) > 8:
            ax.tick_params(axis="x", labelrotation=60)
    else:
        ax.text(0.5, 0.5, "no finished steps", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("step time (s)")
    ax.set_title("Step time per pipeline")
