"""The plot of `rlix-sim jobs --plot`: where each group's mean job time goes, against its time alone.

One horizontal bar per group of `rlix.runs.breakdown` (the row over every job last): the mean wait to
start, then the run split into the waits for training GPUs once started and the rest of the
run, with a mark at the mean time alone on the home. A bar past its mark is time lost to
sharing; a bar short of it, a job that ran faster than alone (it borrowed GPUs).

`plot_path` turns what the user typed into the file that will be written, checked before any
work: a format by its suffix (`plot_suffixes`; none: PNG), a folder gets `jobs.png`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from rlix.runs.errors import RunError
from rlix.runs.paths import check_out_file

#: matplotlib's formats a plot is not written as: pgf needs LaTeX, raw and rgba are bare pixels.
_NOT_PLOT_FORMATS = frozenset({"pgf", "raw", "rgba"})
#: The file written into a folder given as the plot's path.
DEFAULT_NAME = "jobs.png"
#: A bar's row, inches; rows are squeezed below it so that the figure stays under
#: `MAX_HEIGHT_IN` (at the 110 dpi it is saved at, under the 2^16 pixels Agg can draw: one row
#: per job of lab-day-1024, 1,044, came to 51,859 px; a few hundred more would not draw).
ROW_IN = 0.45
MAX_HEIGHT_IN = 500.0

#: The parts of a bar, in order, with their legend labels and colours.
PARTS = (("queueing_s", "waiting to start", "#c44e52"),
         ("train_wait_s", "waiting for training GPUs", "#dd8452"),
         ("other_run_s", "the rest of the run", "#4c72b0"))


def segments(groups: pd.DataFrame) -> pd.DataFrame:
    """Per group (its rows in order), the bar's parts in seconds: `queueing_s`, `train_wait_s`
    (0 when the run kept no waits) and `other_run_s` (the run less those waits, at least 0), and
    `alone_s` for the mark, each the group's mean as the table gives it (a job still running has
    waits but no run time, so in a group with one the parts need not add up to its JCT). Groups
    with no finished job (no run time) are left out."""
    finished = groups[groups["run_s"].notna()]
    train = finished["train_wait_s"].fillna(0.0)
    return pd.DataFrame({
        "group": finished["group"].to_numpy(),
        "queueing_s": finished["queueing_s"].fillna(0.0).to_numpy(),
        "train_wait_s": train.to_numpy(),
        "other_run_s": (finished["run_s"] - train).clip(lower=0.0).to_numpy(),
        "alone_s": finished["alone_s"].to_numpy(),
    })


def plot_suffixes() -> list[str]:
    """The suffixes a plot can be written as: matplotlib's image and document formats (.png
    first, then .pdf, .svg, the others in alphabetical order)."""
    from matplotlib.backend_bases import FigureCanvasBase

    formats = set(FigureCanvasBase.get_supported_filetypes()) - _NOT_PLOT_FORMATS
    first = [f for f in ("png", "pdf", "svg") if f in formats]
    return [f".{f}" for f in [*first, *sorted(formats - set(first))]]


def plot_path(path: str | Path) -> Path:
    """The file a plot asked for as `path` is written to, checked before any work: `path` as
    given when its suffix is one of `plot_suffixes()` (any case); with no suffix, `path` + ".png";
    an existing folder, or a path ending in a separator, `<folder>/jobs.png`. RunError (naming
    the path) for another suffix, or a place that cannot be written; nothing is written."""
    text = os.fspath(path)
    out = Path(text)
    if text.endswith((os.sep, "/")) or out.is_dir():
        out = out / DEFAULT_NAME
    elif not out.suffix:
        out = out.with_name(out.name + ".png")
    elif out.suffix.lower() not in (suffixes := plot_suffixes()):
        raise RunError(f"cannot write a plot as {out.suffix!r}; give the file one of the suffixes "
                       f"{', '.join(suffixes)}", file=text)
    return check_out_file(out)


def plot_path_arg(text: str) -> str:
    """`plot_path` as an argparse type (`--plot PATH`): a bad path is refused as the command line
    is parsed, with the option named."""
    import argparse

    try:
        return str(plot_path(text))
    except RunError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def plot_breakdown(groups: pd.DataFrame, path: str | Path, title: str = "") -> Path:
    """Write the plot of `groups` (a `breakdown` table) to `path` (its format by the suffix:
    `plot_suffixes()`) and return the file written. `path` is taken through `plot_path` (a folder:
    `jobs.png` in it; no suffix: PNG); RunError if it will not do or cannot be written, or if no
    group has a finished job (nothing to draw; nothing is written)."""
    out = plot_path(path)
    parts = segments(groups)
    if not len(parts):  # matplotlib would write an empty frame, its title cut off
        raise RunError("no job in this run finished: no bar to plot (without --plot: the tables)",
                       file=out)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = np.arange(len(parts))[::-1]  # the first group on top
    row_in = min(ROW_IN, (MAX_HEIGHT_IN - 1.2) / len(parts))
    figure, ax = plt.subplots(figsize=(9, 1.2 + row_in * len(parts)), constrained_layout=True)
    left = np.zeros(len(parts))
    for column, label, colour in PARTS:
        ax.barh(rows, parts[column], left=left, color=colour, label=label, height=0.6)
        left = left + parts[column].to_numpy()
    if parts["alone_s"].notna().any():
        ax.scatter(parts["alone_s"], rows, marker="|", s=400, color="black", zorder=3,
                   label="alone on its home")
    # Labels as tall as their rows, once rows are squeezed (a stream of thousands of jobs).
    ax.set_yticks(rows, parts["group"], fontsize=min(10.0, max(1.0, 0.8 * 72 * row_in)))
    ax.set_xlabel("mean per job, s")
    ax.set_title(title or "where jobs' time goes")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.6 / (1 + len(parts))), ncol=4,
              fontsize="small", frameon=False)  # below the axes: never over a bar
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(out, dpi=110)
    except OSError as error:
        raise RunError(f"cannot write the plot: {error.strerror or error}", file=out) from error
    finally:
        plt.close(figure)
    return out
