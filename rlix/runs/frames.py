"""A finished run as pandas tables (`RunTables`): from a `Recorder`, checked against the schema.

Metrics, the timeline and the plots read `RunTables`, never the recorder, so they work the same
on a run just finished and on a run folder loaded back (`rlix.runs.load`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from rlix.policy.specs import PipelineSpec
from rlix.runs.eventlog import facts_from_lines
from rlix.runs.host import STAGE_COLUMNS
from rlix.runs.recorder import ACTIVITY_COLUMNS, ALLOCATION_COLUMNS, WAIT_COLUMNS, Recorder
from rlix.traces.schema import TABLE_COLUMNS, TABLE_NAMES, TableName
from rlix.traces.tables import conform_table


@dataclass
class RunTables:
    """Everything the metrics, timeline and plots need from one finished run."""

    policy: str
    num_gpus: int
    makespan_s: float
    specs: dict[str, PipelineSpec]
    allocations: pd.DataFrame
    activity: pd.DataFrame
    waits: pd.DataFrame
    steps: pd.DataFrame
    rollouts: pd.DataFrame
    #: Rollout ranks shrunk per pipeline, by reason (from the decisions in the event log).
    shrinks: dict[str, Counter[str]] = field(default_factory=dict)
    #: When each pipeline was admitted and removed (from the event log; a pipeline missing
    #: from these was there from the start, or to the end).
    admitted_s: dict[str, float] = field(default_factory=dict)
    removed_s: dict[str, float] = field(default_factory=dict)
    #: The removed pipelines that failed (crashed or were killed) rather than finished.
    failed: set[str] = field(default_factory=set)
    #: Pipelines seen only in tables a streamed run did not keep in memory.
    more_pipelines: tuple[str, ...] = ()

    def table(self, name: TableName) -> pd.DataFrame:
        frame: pd.DataFrame = getattr(self, name)
        return frame

    @cached_property
    def pipeline_ids(self) -> list[str]:
        """Every pipeline that registered or appears in a table, sorted (computed once)."""
        seen = set(self.specs) | set(self.more_pipelines)
        for name in TABLE_NAMES:
            seen.update(self.table(name)["pipeline_id"].dropna().unique().tolist())
        return sorted(seen)


def tables_from_recorder(recorder: Recorder, specs: dict[str, PipelineSpec] | None = None) -> RunTables:
    """The tables of a finished recorder (`finish` called). `specs` default to the pipelines
    registered in its event log. Raises TraceError if a table breaks the schema."""
    facts = recorder.sink.facts if recorder.sink is not None else facts_from_lines(recorder.event_lines)
    raw: dict[TableName, pd.DataFrame] = {
        "allocations": frame_of_rows("allocations", recorder.allocations, ALLOCATION_COLUMNS),
        "activity": frame_of_rows("activity", recorder.activity, ACTIVITY_COLUMNS),
        "waits": frame_of_rows("waits", recorder.waits, WAIT_COLUMNS),
        "steps": _steps_frame(recorder.steps),
        "rollouts": _frame("rollouts", recorder.rollouts),
    }
    frames = {name: conform_table(frame, name, f"<{name} of the run>") for name, frame in raw.items()}
    return RunTables(
        policy=recorder.policy,
        num_gpus=recorder.topology.num_gpus,
        makespan_s=float(recorder.end_s),
        specs=dict(specs) if specs is not None else facts.specs,
        shrinks=facts.shrinks,
        admitted_s=facts.admitted_s,
        removed_s=facts.removed_s,
        failed=facts.failed,
        **frames,
    )


def frame_of_rows(name: TableName, rows: list[tuple[Any, ...]], names: tuple[str, ...]) -> pd.DataFrame:
    """Table `name` (not yet conformed) from a recorder's row tuples of columns `names`."""
    return _frame(name, {column: [row[i] for row in rows] for i, column in enumerate(names)})


def _frame(name: TableName, columns: Mapping[str, Sequence[Any]]) -> pd.DataFrame:
    """A frame from Python lists, column by column through numpy: pandas infers a long list's
    dtype several times slower; arrays (a simulator's rollouts) as they are. Values are not
    coerced (conform_table checks them)."""
    text = {c for c, dtype in TABLE_COLUMNS[name].items() if dtype == "string"}
    return pd.DataFrame({
        column: values if isinstance(values, pd.Categorical | np.ndarray)
        else np.array(values, dtype=object) if column in text else np.asarray(values)
        for column, values in columns.items()
    }, copy=False)  # copy=False: no copy to consolidate the columns into 2-D blocks


def _steps_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    columns = [*TABLE_COLUMNS["steps"], *STAGE_COLUMNS]
    frame = pd.DataFrame.from_records(rows) if rows else pd.DataFrame(columns=columns)
    for column in STAGE_COLUMNS:
        if column not in frame.columns:
            frame[column] = 0.0
    return frame
