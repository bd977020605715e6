"""Progress in a log (stderr not a terminal): plain lines at each tenth, no redrawn bar; a bar
on a terminal."""

from __future__ import annotations

import io

import pytest

from rlix.runs.progress import count_progress, sim_progress


def _said(log: io.StringIO) -> list[str]:
    return [line.split(" after ")[0] for line in log.getvalue().splitlines()]


def test_simulated_seconds_log_a_line_at_each_tenth_or_each_simulated_hour() -> None:
    log = io.StringIO()
    update, close = sim_progress("x", 1000.0, log)
    for t in (60, 99, 100, 120, 350, 1000):  # 350 passes two tenths: one line
        update(float(t))
    close()
    assert _said(log) == ["x: 100 sim s (10%)", "x: 350 sim s (35%)", "x: 1,000 sim s (100%)"]
    log = io.StringIO()
    update, _ = sim_progress("day", None, log)
    for t in range(0, 3 * 3600 + 1, 600):
        update(float(t))
    assert _said(log) == ["day: 3,600 sim s", "day: 7,200 sim s", "day: 10,800 sim s"]


def test_counts_log_a_line_at_each_tenth_and_every_one_when_few() -> None:
    log = io.StringIO()
    update, close = count_progress(30, "point", "sweep", stream=log)
    for done in range(1, 31):
        update(done)
    close()
    assert _said(log) == [f"sweep: {n}/30 points" for n in range(3, 31, 3)]
    log = io.StringIO()
    update, _ = count_progress(3, "run", stream=log)
    for done in (1, 2, 3):
        update(done)
    assert _said(log) == ["1/3 runs", "2/3 runs", "3/3 runs"]
    log = io.StringIO()
    update, _ = count_progress(3, "run", quiet=True, stream=log)
    update(3)
    assert log.getvalue() == ""


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar_redrawn_in_place() -> None:
    terminal = _Terminal()
    update, close = sim_progress("x", 100.0, terminal)
    update(50.0)
    close()
    terminal_counts = _Terminal()
    update, close = count_progress(4, "point", "sweep", stream=terminal_counts)
    update(2)
    close()
    assert "\r" in terminal.getvalue() and "sim s" in terminal.getvalue()
    assert "\r" in terminal_counts.getvalue() and "2/4" in terminal_counts.getvalue()


def test_a_slow_run_logs_a_line_at_least_every_minute_of_wall_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A simulated hour that takes ten minutes (lab-day-1024 under rlix) is not ten minutes of
    silence: a line comes once a minute has passed, if the simulated clock has moved."""
    from rlix.runs import progress

    clock = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    log = io.StringIO()
    update, _ = sim_progress("big", None, log)
    for t in range(60, 601, 60):  # 10 simulated minutes, 30 wall seconds each
        clock[0] += 30.0
        update(float(t))
    update(600.0)  # the clock has not moved: no line, however long it took
    clock[0] += 120.0
    update(600.0)
    assert _said(log) == [f"big: {t} sim s" for t in (120, 240, 360, 480, 600)]
    update(3600.0)  # the hour mark as before
    assert _said(log)[-1] == "big: 3,600 sim s"
