"""The error of a run folder that cannot be written, read or replayed: one line naming where."""

from __future__ import annotations

from pathlib import Path


class RunError(ValueError):
    """`str(error)` is one line: ``FILE, line N: what is wrong`` (parts that do not apply are
    left out). Table files inside a run folder raise `rlix.traces.TraceError` instead."""

    def __init__(self, message: str, file: str | Path | None = None, line: int | None = None) -> None:
        self.message = message
        self.file = None if file is None else str(file)
        self.line = line
        # args are the constructor's, so that copies (SimPy re-raises a process's exception
        # as type(e)(*e.args), pickling does the same) are whole.
        super().__init__(message, self.file, line)

    def __str__(self) -> str:
        where = [] if self.file is None else [self.file]
        if self.line is not None:
            where.append(f"line {self.line}")
        text = " ".join(self.message.split())
        return ": ".join([", ".join(where), text]) if where else text


class LivelockError(RunError):
    """The policy's decisions undid each other over and over with no time passing
    (rlix.runs.loop): a policy bug, and the run cannot go on."""
