"""A run's record streamed to its folder as the run goes, so a long run's memory stays bounded.

A `Recorder` given a `RunSink` keeps none of the parts that grow with the run in memory:

- `events.jsonl` is appended line by line (the facts the summary needs from it, `EventFacts`,
  are kept as the lines pass);
- `allocations` and `activity`, when the run folder asks for them, go out a piece at a time
  (Parquet row groups or CSV lines, `rlix.traces.tables.TableStream`);
- either way their intervals are spilled in a compact form (`rlix.runs.totals.CoverSpill`) and
  reduced per pipeline at the end into the summary's GPU time shares, the same figures the
  in-memory tables give.

`steps` and `waits` stay in memory (a row per step and per request: the summary's step time
and wait percentiles need every value, and a simulated week of 1,024 GPUs has ~10^5 of each);
`rollouts` too when asked for (a driver hands them over at the end); when not, the driver keeps
running counts instead (`Recorder.add_rollout_counts`).

Everything goes into a hidden sibling of the run folder that `finish_streamed` completes and
moves into place, as `write_run` does, so a failed run leaves no half-written folder behind.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from rlix.policy.specs import PipelineSpec
from rlix.runs.errors import RunError
from rlix.runs.eventlog import EVENTS_FILE, EventFacts
from rlix.runs.frames import RunTables, frame_of_rows, tables_from_recorder
from rlix.runs.recorder import ACTIVITY_COLUMNS, ALLOCATION_COLUMNS, Recorder
from rlix.runs.tablechoice import ALL_TABLES, check_tables
from rlix.runs.totals import BUSY, HELD, LOADING, CoverSpill, counts_frame, trajectory_counts
from rlix.traces.schema import TableName
from rlix.traces.tables import TableFormat, TableStream, read_table, write_table

#: The tables streamed as the run goes (the others are small or handed over at the end).
STREAMED: tuple[TableName, ...] = ("allocations", "activity")
COVER_FOLDER = ".cover"
#: Rows of a streamed table gathered before they are written as one piece.
PIECE_ROWS = 1 << 17


class RunSink:
    """Where a streaming `Recorder` puts what grows with the run (see the module docstring)."""

    def __init__(self, out_dir: Path, folder: Path, tables: Collection[str], format: TableFormat) -> None:
        self.out_dir, self.folder = out_dir, folder
        self.tables, self.format = frozenset(tables), format
        self.facts = EventFacts()
        self._events = (folder / EVENTS_FILE).open("w", encoding="utf-8", buffering=1 << 20)
        self.cover = CoverSpill(folder / COVER_FOLDER)
        self.streams = {name: TableStream(folder, name, format) for name in STREAMED if name in self.tables}
        self._rows: dict[TableName, list[tuple[Any, ...]]] = {name: [] for name in self.streams}
        self.closed = False

    def event_line(self, line: str) -> None:
        self._events.write(line)
        self._events.write("\n")
        self.facts.add_line(line)

    def allocation(self, row: tuple[Any, ...]) -> None:
        self.cover.add(row[0], row[4], row[5], row[6], HELD)
        self._keep("allocations", row)

    def activity(self, row: tuple[Any, ...]) -> None:
        self.cover.add(row[0], row[3], row[6], row[7], LOADING if row[4] == "loading" else BUSY)
        self._keep("activity", row)

    def _keep(self, name: TableName, row: tuple[Any, ...]) -> None:
        rows = self._rows.get(name)
        if rows is not None:
            rows.append(row)
            if len(rows) >= PIECE_ROWS:
                self._flush(name)

    def _flush(self, name: TableName) -> None:
        rows, self._rows[name] = self._rows[name], []
        if rows:
            self.streams[name].write(_piece(name, rows))

    def close(self) -> None:
        """Write out what is buffered and end every file (the event log, streamed tables)."""
        if self.closed:
            return
        for name in self.streams:
            self._flush(name)
            self.streams[name].close(_piece(name, []))
        self._events.close()
        self.cover.flush()
        self.closed = True

    def discard(self) -> None:
        """The run failed: its partial folder goes."""
        self.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _piece(name: TableName, rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    columns = ALLOCATION_COLUMNS if name == "allocations" else ACTIVITY_COLUMNS
    return frame_of_rows(name, rows, columns)


def open_sink(out_dir: str | Path, tables: Collection[str] = ALL_TABLES,
              format: TableFormat = "parquet", overwrite: bool = False) -> RunSink:
    """A sink writing into a hidden sibling of `out_dir` (checked as `write_run` checks it)."""
    from rlix.runs.folder import check_table_format
    from rlix.runs.paths import check_out_dir, new_folder

    out = check_out_dir(out_dir, overwrite)
    check_table_format(format)
    chosen = check_tables(tables)  # before the staging folder, which a refusal would leave behind
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = new_folder(out.parent, f".{out.name}.")
    return RunSink(out, staging, chosen, format)


def finish_streamed(
    recorder: Recorder, *, scenario_yaml: str, specs: Mapping[str, PipelineSpec] | None = None,
    plots: bool = True, overwrite: bool = False, extra_summary: Mapping[str, Any] | None = None,
    alone_s: Mapping[str, float] | None = None,
) -> tuple[Path, dict[str, Any], RunTables]:
    """Complete the folder of a finished streaming recorder and move it into place; return
    its path, its summary and the tables held in memory (streamed ones are empty)."""
    from rlix.runs.folder import SCENARIO_FILE, SUMMARY_FILE, run_figures, write_extras
    from rlix.runs.jobs import job_rows
    from rlix.runs.paths import check_out_dir, put_in_place

    sink = recorder.sink
    if sink is None or not recorder.finished:
        raise RunError("finish_streamed needs a finished recorder with a sink")
    try:
        sink.close()
        tables = tables_from_recorder(recorder, dict(specs) if specs is not None else None)
        counted = recorder.rollout_counts
        tables = dataclasses.replace(tables, more_pipelines=(*sink.cover.pipeline_ids, *counted))
        kept = "rollouts" in sink.tables
        trajectories = trajectory_counts(tables.rollouts) if kept else counts_frame(counted)
        totals = sink.cover.totals(tables, trajectories)
        figures = run_figures(tables, recorder, alone_s=alone_s, extra_summary=extra_summary, totals=totals)
        folder = sink.folder
        (folder / SUMMARY_FILE).write_text(json.dumps(figures, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        (folder / SCENARIO_FILE).write_text(scenario_yaml, encoding="utf-8")
        for name in ("steps", "waits", "rollouts"):
            if name in sink.tables:
                write_table(tables.table(name), folder, name, sink.format)
        if "jobs" in sink.tables:
            write_table(job_rows(tables, alone_s, totals.first_grant), folder, "jobs", sink.format)
        sink.cover.remove()
        # The timeline and plots read the holdings back when they were kept (the file, not
        # the run, bounds that); without them they show what is left (steps).
        shown = {name: read_table(folder, name) for name in STREAMED if name in sink.tables}
        write_extras(dataclasses.replace(tables, **shown), folder, plots)
        out = check_out_dir(sink.out_dir, overwrite)
        put_in_place(folder, out)
    except BaseException:
        sink.discard()
        raise
    return out, figures, tables
