"""Simulations side by side in local processes, with their progress on stderr (a bar, or lines
in a log: rlix.runs.progress).

What the benches that run one setting over many seeds or variants share (bench/move_costs.py,
bench/job_order.py, bench/finish_together.py); a sweep across machines is `rlix-sim sweep`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

from rlix.runs.progress import count_progress

R = TypeVar("R")


def run_all(
    fn: Callable[..., R], jobs: Sequence[tuple[Any, ...]], workers: int, quiet: bool, unit: str = "run"
) -> list[R]:
    """`fn(*job)` for every job in `workers` processes, results in the order of `jobs`; the bar
    counts finished jobs unless `quiet`. `fn` must be importable (a module-level function)."""
    update, close = count_progress(len(jobs), unit, quiet=quiet)
    results: list[R] = []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for result in pool.map(fn, *zip(*jobs, strict=True)) if jobs else ():
            results.append(result)
            update(len(results))
    close()
    return results
