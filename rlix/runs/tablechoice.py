"""Which tables a run folder gets (`--tables`): the names, checked. Light on purpose: the
command lines import it to build their parsers, before any run."""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from rlix.runs.errors import RunError
from rlix.traces.schema import TABLE_NAMES

#: What `--tables` may name: the run tables and the per-job table.
TABLE_CHOICES: tuple[str, ...] = (*TABLE_NAMES, "jobs")
ALL_TABLES = frozenset(TABLE_CHOICES)


def check_tables(names: Iterable[str]) -> frozenset[str]:
    """The set of table names, or RunError naming the unknown ones and the known ones."""
    chosen = [name.strip() for name in names if name.strip()]
    unknown = [name for name in chosen if name not in ALL_TABLES]
    if unknown or not chosen:
        what = f"unknown table(s) {', '.join(unknown)}" if unknown else "no table named"
        raise RunError(f"--tables: {what} (known: {', '.join(TABLE_CHOICES)})")
    return frozenset(chosen)


def tables_option(text: str) -> frozenset[str]:
    """argparse type of `--tables NAME,NAME,...`: a bad name is argparse's one-line error."""
    try:
        return check_tables(text.split(","))
    except RunError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("--tables: ")) from None
