"""The one error type of rlix.traces: bad input, reported as a single line naming where it is."""

from __future__ import annotations

from pathlib import Path


class TraceError(ValueError):
    """A trace, summary or run-output table that cannot be read, written or used.

    `str(error)` is one line: ``FILE, line N, column 'C': what is wrong``. Text files (CSV,
    JSON Lines) are pointed at by `line`, the file's 1-based line number as an editor shows it
    (a CSV header is line 1; blank lines count). Tables without lines (Parquet, a JSON array, a
    DataFrame) are pointed at by `row`, shown as ``row N (1-based)``. The parts that do not apply
    are left out. The fields stay available to callers that want to point at the spot themselves.
    """

    def __init__(
        self,
        message: str,
        file: str | Path | None = None,
        row: int | None = None,
        line: int | None = None,
        column: str | None = None,
    ) -> None:
        self.message = message
        self.file = None if file is None else str(file)
        self.row = row
        self.line = line
        self.column = column
        # args are the constructor's, so that copies (SimPy re-raises a process's exception
        # as type(e)(*e.args), pickling does the same) are whole.
        super().__init__(message, self.file, row, line, column)

    def __str__(self) -> str:
        return self._one_line()

    def _one_line(self) -> str:
        where = []
        if self.file is not None:
            where.append(self.file)
        if self.line is not None:
            where.append(f"line {self.line}")
        elif self.row is not None:
            where.append(f"row {self.row} (1-based)")
        if self.column is not None:
            where.append(f"column {self.column!r}")
        text = " ".join(self.message.split())  # keep it on one line whatever the cause said
        return ": ".join([", ".join(where), text]) if where else text

    def at(self, file: str | Path) -> TraceError:
        """The same error, naming `file` (for errors raised before the file was known)."""
        return TraceError(self.message, file=file, row=self.row, line=self.line, column=self.column)
