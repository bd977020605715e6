"""Interval arithmetic against brute force: sample the time line at every half second."""

from __future__ import annotations

import numpy as np
import pytest

from rlix.runs.intervals import merge, per_bin, sweep


def _random_intervals(seed: int, n: int = 60) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 4, n)
    starts = rng.integers(0, 40, n).astype(float)
    ends = starts + rng.integers(0, 12, n)  # some empty (end == start)
    layers = rng.integers(0, 3, n)
    return keys, starts, ends, layers


def _covers(keys: np.ndarray, starts: np.ndarray, ends: np.ndarray, key: int, t: float) -> int:
    return sum(1 for k, s, e in zip(keys, starts, ends, strict=True) if k == key and s <= t < e)


@pytest.mark.parametrize("seed", range(5))
def test_sweep_counts_match_sampling(seed: int) -> None:
    keys, starts, ends, layers = _random_intervals(seed)
    segments = sweep(keys, starts, ends, layers, 3)
    for key in range(4):
        for t in np.arange(0.5, 55.0, 1.0):
            expected = [_covers(keys[layers == layer], starts[layers == layer], ends[layers == layer], key, t)
                        for layer in range(3)]
            hit = (segments.keys == key) & (segments.t0 <= t) & (t < segments.t1)
            got = segments.counts[hit][0].tolist() if hit.any() else [0, 0, 0]
            assert hit.sum() <= 1
            assert got == expected, (key, t)


@pytest.mark.parametrize("seed", range(5))
def test_merge_is_the_union_and_joins_small_gaps(seed: int) -> None:
    keys, starts, ends, _ = _random_intervals(seed)
    for gap in (0.0, 3.0):
        k, s, e = merge(keys, starts, ends, gap)
        for key in range(4):
            mine = sorted(zip(s[k == key], e[k == key], strict=True))
            assert all(b[0] - a[1] > gap for a, b in zip(mine, mine[1:], strict=False))  # disjoint, apart
            if gap == 0.0:
                for t in np.arange(0.5, 55.0, 1.0):
                    in_union = _covers(keys, starts, ends, key, t) > 0
                    assert in_union == any(a <= t < b for a, b in mine)


def test_per_bin_splits_lengths_exactly() -> None:
    t0, t1 = np.array([0.0, 5.0, 12.0]), np.array([10.0, 7.0, 30.0])
    edges = np.array([0.0, 5.0, 10.0, 20.0, 40.0])
    assert per_bin(t0, t1, edges).tolist() == [5.0, 7.0, 8.0, 10.0]
    assert per_bin(t0[:0], t1[:0], edges).tolist() == [0.0, 0.0, 0.0, 0.0]
