"""Reading a run folder back (`load`), for notebooks, comparisons and the checks.

Tables are read when first used and kept, so opening a run with millions of rollouts to look
at its summary costs nothing; the event log is read lazily, record by record.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from rlix.policy.specs import PipelineSpec, PolicyConfig, Topology
from rlix.runs import codec
from rlix.runs.errors import RunError
from rlix.runs.eventlog import EventFacts, events_path, facts_from_file, iter_records, read_header
from rlix.runs.folder import SCENARIO_FILE, SUMMARY_FILE
from rlix.runs.frames import RunTables
from rlix.traces.tables import read_table


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

    @cached_property
    def allocations(self) -> pd.DataFrame:
        return read_table(self.path, "allocations")

    @cached_property
    def steps(self) -> pd.DataFrame:
        return read_table(self.path, "steps")

    @cached_property
    def rollouts(self) -> pd.DataFrame:
        return read_table(self.path, "rollouts")

    @cached_property
    def activity(self) -> pd.DataFrame:
        return read_table(self.path, "activity")

    @cached_property
    def waits(self) -> pd.DataFrame:
        return read_table(self.path, "waits")

    @cached_property
    def jobs(self) -> pd.DataFrame:
        """One row per pipeline: arrival, start, finish, JCT, alone, slowdown (rlix.runs.jobs)."""
        return read_table(self.path, "jobs")

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
        """The tables in the form the metrics, timeline and plots take."""
        return RunTables(
            policy=self.policy,
            num_gpus=self.topology.num_gpus,
            makespan_s=float(self.summary["makespan_s"]),
            specs=self.specs,
            shrinks=self.facts.shrinks,
            admitted_s=self.facts.admitted_s,
            removed_s=self.facts.removed_s,
            allocations=self.allocations,
            activity=self.activity,
            waits=self.waits,
            steps=self.steps,
            rollouts=self.rollouts,
        )


def load(run_dir: str | Path) -> Run:
    """Open the run folder `run_dir`. RunError (one line) if it is not a readable run folder."""
    path = events_path(run_dir).parent
    header = read_header(path / "events.jsonl")
    try:
        codec.core_from_header(header)
    except (KeyError, TypeError) as error:
        raise RunError(f"bad header: {error!r}", file=path / "events.jsonl", line=1) from error
    return Run(path, _read_summary(path / SUMMARY_FILE), _read_text(path / SCENARIO_FILE), header)


def _read_summary(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError as error:
        raise RunError(f"not JSON: {error.msg}", file=path, line=error.lineno) from error
    if not isinstance(data, dict) or "makespan_s" not in data:
        raise RunError("not a run summary (no makespan_s)", file=path)
    return data


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as error:
        raise RunError("missing from the run folder", file=path) from error
    except (OSError, UnicodeDecodeError) as error:
        raise RunError(f"cannot read: {error}", file=path) from error
