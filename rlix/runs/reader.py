"""Reading a run folder back (`load`), for notebooks, comparisons and the checks.

Tables are read when first used and kept, so opening a run with millions of rollouts to look
at its summary costs nothing; the event log is read lazily, record by record.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from rlix.policy.config import PolicyConfig
from rlix.policy.errors import PolicyError
from rlix.policy.policies import get_policy
from rlix.policy.specs import PipelineSpec, Topology
from rlix.runs import codec
from rlix.runs.errors import RunError
from rlix.runs.eventlog import (
    EventFacts,
    events_path,
    facts_from_file,
    iter_records,
    newline_before,
    read_header,
)
from rlix.runs.folder import SCENARIO_FILE, SUMMARY_FILE
from rlix.runs.frames import RunTables
from rlix.runs.tablechoice import TABLE_CHOICES
from rlix.traces.schema import TABLE_NAMES
from rlix.traces.tables import read_table, table_path


@dataclass
class Run:
    """One run folder: its summary, scenario, header, tables (pandas) and event log."""

    path: Path
    summary: dict[str, Any]
    scenario: str
    header: dict[str, Any]

    @property
    def topology(self) -> Topology:
        return codec.core_from_header(self.header)[0]

    @property
    def policy(self) -> str:
        return codec.core_from_header(self.header)[1]

    @property
    def config(self) -> PolicyConfig:
        return codec.core_from_header(self.header)[2]

    @property
    def kept_tables(self) -> list[str]:
        """The tables this folder holds (a run with `--tables` keeps only those named)."""
        return [name for name in TABLE_CHOICES if self._has(name)]

    def _has(self, name: str) -> bool:
        return any(table_path(self.path, name, fmt).exists() for fmt in ("parquet", "csv"))  # type: ignore[arg-type]

    def _read(self, name: str) -> pd.DataFrame:
        if not self._has(name):
            kept = ", ".join(self.kept_tables) or "none"
            raise RunError(f"no {name} table here: the run kept {kept} (it was run with --tables; run "
                           f"again with {name} among them, or without --tables)", file=self.path)
        return read_table(self.path, name)  # type: ignore[arg-type]

    @cached_property
    def allocations(self) -> pd.DataFrame:
        return self._read("allocations")

    @cached_property
    def steps(self) -> pd.DataFrame:
        return self._read("steps")

    @cached_property
    def rollouts(self) -> pd.DataFrame:
        return self._read("rollouts")

    @cached_property
    def activity(self) -> pd.DataFrame:
        return self._read("activity")

    @cached_property
    def waits(self) -> pd.DataFrame:
        return self._read("waits")

    @cached_property
    def jobs(self) -> pd.DataFrame:
        """One row per pipeline: arrival, start, finish, JCT, alone, slowdown (rlix.runs.jobs)."""
        return self._read("jobs")

    @cached_property
    def facts(self) -> EventFacts:
        return facts_from_file(self.path / "events.jsonl")

    @property
    def specs(self) -> dict[str, PipelineSpec]:
        """Each pipeline's spec, as registered in the event log (a sized home as placed)."""
        return self.facts.specs

    def events(self) -> Iterator[dict[str, Any]]:
        """The event log after the header, one `{"event": ..., "decisions": [...]}` at a time
        (segment lines of a resumed run left out)."""
        for _number, record in iter_records(self.path / "events.jsonl"):
            if "event" in record:
                yield record

    def tables(self) -> RunTables:
        """The tables in the form the metrics, timeline and plots take (all five run tables:
        RunError naming those a `--tables` run did not keep)."""
        missing = [name for name in TABLE_NAMES if not self._has(name)]
        if missing:
            raise RunError(f"the metrics and plots need every run table; this run kept "
                           f"{', '.join(self.kept_tables) or 'none'}, not {', '.join(missing)}", file=self.path)
        return RunTables(
            policy=self.policy,
            num_gpus=self.topology.num_gpus,
            makespan_s=float(self.summary["makespan_s"]),
            specs=self.specs,
            shrinks=self.facts.shrinks,
            admitted_s=self.facts.admitted_s,
            removed_s=self.facts.removed_s,
            failed=self.facts.failed,
            allocations=self.allocations,
            activity=self.activity,
            waits=self.waits,
            steps=self.steps,
            rollouts=self.rollouts,
        )


def load(run_dir: str | Path) -> Run:
    """Open the run folder `run_dir`. RunError (one line) if it is not a readable run folder."""
    events = events_path(run_dir)
    header, _core = read_core(events)
    _check_last_line(events)
    path = events.parent
    return Run(path, read_summary(path / SUMMARY_FILE), _read_text(path / SCENARIO_FILE), header)


def _check_last_line(events: Path) -> None:
    """RunError unless the last line of `events` is whole JSON. A run folder is moved into
    place once written, so a line cut short is a copy or a disk that failed; the log is read
    lazily, so `events()` would meet it only at its end, and `facts` (which parses only a few
    lines) never: the specs and removals of part of the run, without a word."""
    try:
        with events.open("rb") as handle:
            end = handle.seek(0, os.SEEK_END)
            while True:  # back over blank lines to the last one with text
                start = newline_before(handle, end) + 1
                handle.seek(start)
                last = handle.read(end - start).strip()
                if last or start == 0:
                    break
                end = start - 1
    except OSError as error:
        raise RunError(f"cannot read: {error.strerror or error}", file=events) from error
    try:
        json.loads(last)
    except ValueError as error:  # not JSON, or not UTF-8
        reason = error.msg if isinstance(error, json.JSONDecodeError) else "not UTF-8"
        raise RunError(f"the last line is not JSON ({reason}): the file was cut short, not written or copied whole",
                       file=events) from error


def read_core(events: Path) -> tuple[dict[str, Any], tuple[Topology, str, PolicyConfig]]:
    """The header of the events file `events` and the core it describes (topology, policy,
    config), checked as the core checks them when a replay builds it. Whatever reads a run
    (`load`, `replay`) goes through here, so a bad header is the same one line (naming the
    file, line 1 and what is wrong) from each."""
    header = read_header(events)
    problem = _header_shape(header["header"])
    if problem is not None:
        raise RunError(f"bad header: {problem}", file=events, line=1)
    try:
        topology, policy, config = codec.core_from_header(header)
        topology.validate()
        get_policy(policy)
        config.validate()
    except (TypeError, ValueError, PolicyError) as error:  # unknown or missing fields, bad values
        raise RunError(f"bad header: {error}", file=events, line=1) from error
    return header, (topology, policy, config)


def _header_shape(head: Any) -> str | None:
    """What is wrong with the shape of a header's `{"topology": {...}, "policy": "...",
    "config": {...}}`, or None."""
    if not isinstance(head, dict):
        return f"header is {_json_kind(head)}, not an object {{...}}"
    for key, kind in (("topology", dict), ("policy", str), ("config", dict)):
        if key not in head:
            return f"no {key} in it"
        if not isinstance(head[key], kind):
            return f"{key} is {_json_kind(head[key])}, not {'a name' if kind is str else 'an object {...}'}"
    return None


#: The summary's keys that readers do arithmetic on (seconds: a JSON number, not a boolean,
#: finite and at least 0) or look into (object: {...}), checked when present; `makespan_s` must be.
_SUMMARY_TYPES: dict[str, str] = {
    "makespan_s": "seconds",
    "overall": "object",
    "pipelines": "object",
    "machine": "object",
}


def read_summary(path: Path) -> dict[str, Any]:
    """summary.json at `path`, with the figures readers compute with checked (`_SUMMARY_TYPES`):
    RunError (one line naming the file and the key) otherwise."""
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError as error:
        raise RunError(f"not JSON: {error.msg}", file=path, line=error.lineno) from error
    if not isinstance(data, dict) or "makespan_s" not in data:
        raise RunError("not a run summary (no makespan_s)", file=path)
    for key, kind in _SUMMARY_TYPES.items():
        if key in data:
            _check_summary_value(data[key], key, kind, path)
    return data


def _check_summary_value(value: Any, key: str, kind: str, path: Path) -> None:
    """RunError naming `key` unless `value` is what `_SUMMARY_TYPES` says it must be."""
    if kind == "object":
        if not isinstance(value, dict):
            raise RunError(f"{key} is {_json_kind(value)}, not an object {{...}}", file=path)
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RunError(f"{key} is {_json_kind(value)}, not a number", file=path)
    if not math.isfinite(value) or value < 0:
        raise RunError(f"{key} is {value}; it must be a finite number, at least 0", file=path)


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({json.dumps(value)})"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"a string ({json.dumps(shown)})"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return f"a number ({value})"


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as error:
        raise RunError("missing from the run folder", file=path) from error
    except (OSError, UnicodeDecodeError) as error:
        raise RunError(f"cannot read: {error}", file=path) from error
