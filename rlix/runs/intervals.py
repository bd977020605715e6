"""Interval arithmetic on numpy arrays: unions, overlaps and time bins, without Python loops.

Run tables hold intervals (a GPU held, busy or loading from t_start to t_end) keyed by an
integer (a GPU, or a pipeline-and-GPU pair). A run can have millions of them, so everything
here is vectorised: sort once, then cumulative sums and reductions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

FloatArray = np.ndarray
IntArray = np.ndarray


@dataclass(frozen=True)
class Segments:
    """Maximal pieces of the time line, per key, over which every layer's cover count is fixed.

    `counts[i, layer]` is how many intervals of `layer` cover segment i (key `keys[i]`, from
    `t0[i]` to `t1[i]`). Only segments covered by at least one interval are kept.
    """

    keys: IntArray
    t0: FloatArray
    t1: FloatArray
    counts: IntArray

    @property
    def duration(self) -> FloatArray:
        duration: FloatArray = self.t1 - self.t0
        return duration

    def covered(self, layer: int) -> np.ndarray:
        return self.counts[:, layer] > 0


def sweep(keys: IntArray, starts: FloatArray, ends: FloatArray, layers: IntArray, num_layers: int) -> Segments:
    """Cut each key's time line at every interval end point and count the cover per layer.

    Intervals with `end <= start` cover nothing and are dropped.
    """
    keep = ends > starts
    keys, starts, ends, layers = keys[keep], starts[keep], ends[keep], layers[keep]
    n = len(keys)
    times = np.concatenate([starts, ends])
    point_keys = np.concatenate([keys, keys])
    deltas = np.zeros((2 * n, num_layers), dtype=np.int64)
    rows = np.arange(n)
    deltas[rows, layers] = 1
    deltas[rows + n, layers] = -1
    order = np.lexsort((times, point_keys))
    times, point_keys, deltas = times[order], point_keys[order], deltas[order]
    # Every key's counts return to zero at its last point, so one running sum serves all keys.
    counts = np.cumsum(deltas, axis=0)
    same_key = point_keys[:-1] == point_keys[1:]
    covered = same_key & (counts[:-1] > 0).any(axis=1) & (times[1:] > times[:-1])
    return Segments(point_keys[:-1][covered], times[:-1][covered], times[1:][covered], counts[:-1][covered])


def merge(keys: IntArray, starts: FloatArray, ends: FloatArray, max_gap: float = 0.0) -> tuple[IntArray, FloatArray, FloatArray]:
    """Per key, join intervals that overlap or lie at most `max_gap` apart (0: their union).

    Returns the joined intervals as (keys, starts, ends), sorted by key then start.
    """
    keep = ends > starts
    keys, starts, ends = keys[keep], starts[keep], ends[keep]
    if len(keys) == 0:
        return keys, starts, ends
    order = np.lexsort((starts, keys))
    keys, starts, ends = keys[order], starts[order], ends[order]
    reach = pd.Series(ends).groupby(keys).cummax().to_numpy()
    new = np.ones(len(keys), dtype=bool)
    new[1:] = (keys[1:] != keys[:-1]) | (starts[1:] > reach[:-1] + max_gap)
    first = np.flatnonzero(new)
    return keys[first], starts[first], np.maximum.reduceat(ends, first)


def per_bin(t0: FloatArray, t1: FloatArray, edges: FloatArray) -> FloatArray:
    """Total length of the intervals [t0, t1) falling into each bin between `edges`.

    The covered length up to time t is piecewise linear in t, so evaluating it at the bin edges
    is exact.
    """
    if len(t0) == 0:
        return np.zeros(len(edges) - 1)
    times = np.concatenate([t0, t1])
    deltas = np.concatenate([np.ones(len(t0)), -np.ones(len(t1))])
    order = np.argsort(times, kind="stable")
    times, deltas = times[order], deltas[order]
    level = np.cumsum(deltas)  # intervals open just after each point
    area = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(times))])
    return np.diff(np.interp(edges, times, area))
