"""Column maps: replay a foreign log as it is by naming which of its columns holds what.

A map goes from rlix's name (the target) to the file's name (the source), as on the command
line: ``--column response_tokens=num_decode_tokens``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

import pandas as pd

from rlix.traces.errors import TraceError
from rlix.traces.schema import INPUT_COLUMNS
from rlix.traces.validate import column_listing

ColumnMap = dict[str, str]


def parse_column_map(entries: Iterable[str], targets: Collection[str] = INPUT_COLUMNS) -> ColumnMap:
    """Parse ``TARGET=SOURCE`` entries, e.g. ``["response_tokens=num_decode_tokens"]``.

    Raises TraceError for an entry without ``=``, an empty side, a target not in `targets`
    (by default the input columns of a trace), or a target given twice.
    """
    mapping: ColumnMap = {}
    for entry in entries:
        target, sep, source = entry.partition("=")
        target, source = target.strip(), source.strip()
        if not sep or not target or not source:
            raise TraceError(
                f"column map entry {entry!r} is not TARGET=SOURCE "
                "(e.g. response_tokens=num_decode_tokens)"
            )
        _check_target(target, targets)
        if target in mapping:
            raise TraceError(
                f"column map names {target!r} twice ({mapping[target]!r} and {source!r})"
            )
        mapping[target] = source
    return mapping


def as_column_map(
    column_map: Mapping[str, str] | Iterable[str] | None,
    targets: Collection[str] = INPUT_COLUMNS,
) -> ColumnMap:
    """Accept a ready mapping, ``TARGET=SOURCE`` strings, or None (no map)."""
    if column_map is None:
        return {}
    if isinstance(column_map, Mapping):
        for target in column_map:
            _check_target(target, targets)
        return dict(column_map)
    if isinstance(column_map, str):  # iterating it would read 'response_tokens=x' letter by letter
        raise TraceError(f"a column map is a mapping or a list of TARGET=SOURCE strings, not the string "
                         f"{column_map!r} (write [{column_map!r}])")
    return parse_column_map(column_map, targets)


def apply_column_map(
    raw: pd.DataFrame, column_map: Mapping[str, str], file: str | Path | None = None
) -> pd.DataFrame:
    """Return `raw` with each mapped source column under its target name.

    A file column that already has a target's name is dropped: the map says where that column
    comes from. Unmapped columns are kept. Raises TraceError if a source is not in the file.
    """
    for target, source in column_map.items():
        if source not in raw.columns:
            raise TraceError(
                f"column map {target}={source}: the file has no column {source!r} "
                f"(columns are: {column_listing(raw.columns)})",
                file=file,
            )
    targets = set(column_map)
    sources = set(column_map.values())
    out = pd.DataFrame(index=raw.index)
    for target, source in column_map.items():
        out[target] = raw[source]
    for name in raw.columns:
        if name not in sources and name not in targets:
            out[name] = raw[name]
    return out


def _check_target(target: str, targets: Collection[str]) -> None:
    if target not in targets:
        raise TraceError(
            f"column map target {target!r} is not one of the known columns: {', '.join(targets)}"
        )
