"""The error of a run folder that cannot be written, read or replayed: one line naming where."""

from __future__ import annotations

from pathlib import Path


class RunError(ValueError):
    """`str(error)` is one line: ``FILE, line N: what is wrong`` (parts that do not apply are
    left out). Table files inside a run folder raise `rlix.traces.TraceError` instead."""

    def __init__(self, message: str, *, file: str | Path | None = None, line: int | None = None) -> None:
        self.message = message
        self.file = None if file is None else str(file)
        self.line = line
        where = [] if self.file is None else [self.file]
        if line is not None:
            where.append(f"line {line}")
        text = " ".join(message.split())
        super().__init__(": ".join([", ".join(where), text]) if where else text)


class LivelockError(RunError):
    """The policy's decisions undid each other over and over with no time passing
    (rlix.runs.loop): a policy bug, and the run cannot go on."""
