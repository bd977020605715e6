"""How a live run stops: SIGINT and SIGTERM, taken from Ray and turned into one clean stop.

A run must end with its record written, whatever signal comes when. So the driver takes both
signals for itself (`stop_on_signals`) and decides when one may interrupt: while the run is on
it raises `RunStopped` where the driver waits; before that it is held until the run begins;
while a piece of the record is taken into the driver's copy and journal (`Stops.held`) it waits
for the piece to be whole; while the run folder is written, and after, it is ignored.

What a signal handler raises lands in whatever code runs at that instant, and Ray's is not
ours: `ray.get` hands it back wrapped in a SystemError (`rlix.executor.live._get` unwraps it),
and in Ray's source the `check_signals` its C++ core runs the handlers through while it waits
keeps only KeyboardInterrupt and SystemExit, leaving anything else to be printed as ignored
while the wait goes on. A SIGTERM sent as Ray came up, on a loaded machine, once left a run to
go on to its end; where it was lost was not found again. So a raised stop is kept, and the
driver asks for it again (`Stops.check`) where it is in its own code: after the orchestrator's
launch and set-up, and at every poll of the run.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class RunStopped(Exception):
    """The run was asked to stop (a signal) before its end."""


class Stops:
    """The run's SIGINT and SIGTERM handler: while `on`, a signal raises RunStopped; before
    that it is held, and `on` raises it; after `off` it is ignored."""

    def __init__(self) -> None:
        self.raising = False
        self.over = False
        self.pending: int | None = None
        #: The signal raised as RunStopped, kept in case what it landed in swallowed it.
        self.stopped: int | None = None

    def __call__(self, signum: int, frame: Any) -> None:
        if self.raising:
            self.stopped = signum
            raise RunStopped(_reason(signum))
        if not self.over and self.pending is None:
            self.pending = signum

    def check(self) -> None:
        """Raise again a stop already raised while on (the module docstring: the code it landed
        in may have swallowed it); nothing if none was."""
        if self.raising and self.stopped is not None:
            raise RunStopped(_reason(self.stopped))

    def on(self) -> None:
        self.raising = True
        if self.pending is not None:
            held, self.pending = self.pending, None
            self(held, None)

    def off(self) -> None:
        self.raising, self.over = False, True

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold a signal for the length of the block; raise it (if on) at its end."""
        raising, self.raising = self.raising, False
        try:
            yield
        finally:
            if raising and not self.over:
                self.on()


def _reason(signum: int) -> str:
    return f"{'interrupted' if signum == signal.SIGINT else 'stopped'} ({signal.Signals(signum).name})"


@contextmanager
def stop_on_signals() -> Iterator[Stops]:
    """SIGINT and SIGTERM stop the run the same way (`Stops`). Taken explicitly: a process
    started in the background of a script inherits SIGINT ignored, and Ray's own SIGTERM
    handler prints a stack dump instead of stopping cleanly."""
    stops = Stops()
    try:
        previous = {signum: signal.signal(signum, stops) for signum in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: signals are not ours to take
        yield stops
        return
    try:
        yield stops
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
