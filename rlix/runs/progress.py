"""Progress shown while a command or a bench runs: a tqdm bar on a terminal, plain lines where
stderr is not one (a log file, `nohup`, a batch job's output), since a bar redrawn with carriage
returns makes a log unreadable. The executor's per-pipeline bars (rlix.executor.progress) make
the same choice with `is_terminal`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

#: (update, close): update(x) with x the simulated seconds or the count done so far.
Progress = tuple[Callable[[float], None], Callable[[], None]]

#: What a quiet command shows: nothing.
_nothing: Progress = (lambda x: None, lambda: None)


def is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or odd stream: no bars
        return False


def sim_progress(label: str, total_s: float | None, stream: TextIO | None = None,
                 quiet: bool = False) -> Progress:
    """Simulated seconds: a bar, or a line at each tenth of `total_s` (each simulated hour
    when the run has no set length) and at least every LINE_EVERY_WALL_S wall seconds."""
    stream = sys.stderr if stream is None else stream
    if quiet:
        return _nothing
    if is_terminal(stream):
        from tqdm import tqdm

        bar = tqdm(total=None if total_s is None else round(total_s), desc=label, unit="sim s",
                   leave=False, file=stream, dynamic_ncols=True)
        return (lambda t: bar.update(max(0, round(t) - bar.n))), bar.close

    def share(t: float) -> str:
        return f" ({t / total_s:.0%})" if total_s else ""

    return _lines(stream, total_s / 10 if total_s else 3600.0,
                  lambda t: f"{label}: {t:,.0f} sim s{share(t)}"), lambda: None


def count_progress(total: int, unit: str, label: str = "", quiet: bool = False,
                   stream: TextIO | None = None) -> Progress:
    """A count of `total` things done (runs, sweep points): a bar, or a line at each tenth
    and at least every LINE_EVERY_WALL_S wall seconds once the count moves."""
    stream = sys.stderr if stream is None else stream
    if quiet:
        return _nothing
    if is_terminal(stream):
        from tqdm import tqdm

        bar = tqdm(total=total, unit=unit, desc=label or None, file=stream)

        def update(done: float) -> None:
            bar.n = int(done)
            bar.refresh()

        return update, bar.close
    prefix = f"{label}: " if label else ""
    return _lines(stream, max(total / 10, 1.0), lambda done: f"{prefix}{done:.0f}/{total} {unit}s"), lambda: None


#: Wall seconds after which a log gets a line even if x has not reached its next mark: a
#: simulated hour of lab-day-1024 under rlix takes over ten minutes, which a log otherwise
#: spent silent.
LINE_EVERY_WALL_S = 60.0


def _lines(stream: TextIO, every: float, text: Callable[[float], str]) -> Callable[[float], None]:
    """An update that writes `text(x)` once x has passed the next multiple of `every`, or has
    moved on and LINE_EVERY_WALL_S have passed since the last line."""
    start_s = last_s = time.monotonic()
    next_at = every
    last_x = float("-inf")

    def update(x: float) -> None:
        nonlocal next_at, last_s, last_x
        now_s = time.monotonic()
        if x < next_at and not (x > last_x and now_s - last_s >= LINE_EVERY_WALL_S):
            return
        while next_at <= x:
            next_at += every
        last_s, last_x = now_s, x
        print(f"{text(x)} after {now_s - start_s:.1f} s", file=stream, flush=True)

    return update
