"""Plain aligned text tables, the one table writer every command and bench prints with."""

from __future__ import annotations

from typing import Any

import pandas as pd


def format_table(frame: pd.DataFrame, formats: dict[str, str]) -> str:
    """A plain aligned text table: the first column left-aligned, the rest right-aligned, each
    cell through `formats[column]` (a str.format pattern) when given, nulls as "-"."""
    cells = [[str(c) for c in frame.columns]]
    for _, row in frame.iterrows():
        cells.append([_fmt(row[c], formats.get(c)) for c in frame.columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    lines = [
        "  ".join(
            c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in cells
    ]
    return "\n".join(lines)


def _fmt(value: Any, fmt: str | None) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    try:
        return fmt.format(value) if fmt else str(value)
    except (ValueError, TypeError):
        return str(value)
