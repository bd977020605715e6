"""Verifying a run folder: replay its events through a fresh core, check its invariants.

`replay` feeds every event of `events.jsonl` to a new `Scheduler` built from the log's header
(another one after each segment line of a resumed run) and compares the decisions it returns
with the recorded ones, field by field. Identical decisions prove a simulator run
deterministic, and an executor run faithful to its core. The first divergence is reported with
its line, event, and the recorded and replayed decisions. A log cut short replays identically
as far as it goes, so its end is held to summary.json's (steps, finished, makespan).

`check` runs the checks of `rlix.policy.run_checks` on the folder's tables, with the pipeline specs
registered in its event log, and holds each table to what the event log says happened
(`rlix.runs.crosscheck`): a row deleted, a table emptied, a row the log never caused.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rlix.policy.core import Scheduler
from rlix.policy.errors import PolicyError
from rlix.policy.run_checks import check_allocations, check_rollouts
from rlix.runs import codec
from rlix.runs.crosscheck import (
    CLOSING,
    activity_agrees,
    allocations_agree,
    closings_agree,
    completed_steps,
    jobs_agree,
    log_reaches_summary,
    rollouts_agree,
    steps_agree,
    waits_agree,
)
from rlix.runs.errors import RunError
from rlix.runs.eventlog import EVENTS_FILE, SEGMENT, events_path, iter_records
from rlix.runs.folder import SUMMARY_FILE
from rlix.runs.reader import Run, load, read_core, read_summary
from rlix.runs.tally import EventTally, StepKey, tally_file
from rlix.traces.errors import TraceError
from rlix.traces.schema import TABLE_COLUMNS, TableName
from rlix.traces.tables import conform_table, table_path


@dataclass(frozen=True)
class Divergence:
    """The first event whose replayed decisions differ from the recorded ones."""

    line: int
    event: dict[str, Any]
    recorded: list[dict[str, Any]]
    replayed: list[dict[str, Any]]
    detail: str

    def __str__(self) -> str:
        return (f"line {self.line}: {self.event.get('type')} at t={self.event.get('now')}: {self.detail}\n"
                f"  recorded: {_compact(self.recorded)}\n  replayed: {_compact(self.replayed)}")


@dataclass(frozen=True)
class ReplayResult:
    path: Path
    num_events: int
    num_decisions: int
    divergence: Divergence | None = None

    @property
    def identical(self) -> bool:
        return self.divergence is None

    def __str__(self) -> str:
        if self.divergence is None:
            return f"replayed {self.num_events} events, {self.num_decisions} decisions: identical"
        return (f"{self.path}: diverged after {self.num_events} identical events "
                f"({self.num_decisions} decisions): {self.divergence}")


#: Events replayed between two calls of `replay`'s progress.
PROGRESS_EVERY_EVENTS = 1000


def replay(run_dir: str | Path, *, check_invariants: bool = False,
           progress: Callable[[float], None] | None = None) -> ReplayResult:
    """Replay the event log of `run_dir` through a fresh core; stop at the first divergence.

    With `check_invariants`, the core also checks its invariants after every round (slower);
    a violation is reported as the divergence. RunError if the log cannot be read, or if it
    ends before what summary.json says of the run's end (a log cut short replays identically
    as far as it goes: rlix.runs.crosscheck.log_reaches_summary). `progress`, if given, is
    called with the simulated (or run) time of the event replayed every
    PROGRESS_EVERY_EVENTS events (a run of a thousand jobs replays for many minutes).
    """
    path = events_path(run_dir)
    _header, (topology, policy, config) = read_core(path)
    summary = read_summary(path.parent / SUMMARY_FILE)
    scheduler = Scheduler(topology, policy, config, check_invariants=check_invariants)
    tally = EventTally()
    num_events = num_decisions = last_line = 0
    for number, record in iter_records(path):
        last_line = number
        if SEGMENT in record:  # a resumed run went on with a fresh core
            scheduler = Scheduler(topology, policy, config, check_invariants=check_invariants)
            tally.add(record)
            continue
        try:
            event = codec.decode_event(record["event"])
        except (KeyError, TypeError, ValueError) as error:
            raise RunError(f"cannot decode the event: {error}", file=path, line=number) from error
        recorded = record["decisions"]
        try:
            replayed = [codec.encode(d) for d in scheduler.handle(event)]
        except PolicyError as error:
            refused = Divergence(number, record["event"], recorded, [], f"the core refused the event: {error}")
            return ReplayResult(path, num_events, num_decisions, refused)
        detail = _difference(recorded, replayed)
        if detail is not None:
            return ReplayResult(path, num_events, num_decisions, Divergence(number, record["event"], recorded, replayed, detail))
        tally.add(record)  # recorded == replayed here: the core accepted every field it reads
        num_events += 1
        num_decisions += len(replayed)
        if progress is not None and num_events % PROGRESS_EVERY_EVENTS == 0:
            progress(float(event.now))
    log_reaches_summary(tally, summary, path, last_line or 1)
    return ReplayResult(path, num_events, num_decisions)


def _difference(recorded: list[dict[str, Any]], replayed: list[dict[str, Any]]) -> str | None:
    """What first differs between two decision lists, or None if they are the same."""
    for index, (old, new) in enumerate(zip(recorded, replayed, strict=False)):
        for name in dict.fromkeys([*old, *new]):  # both records' fields, recorded order first
            if old.get(name, "<absent>") != new.get(name, "<absent>"):
                return (f"decision {index} ({old.get('type')}) field {name!r}: recorded "
                        f"{json.dumps(old.get(name))}, replayed {json.dumps(new.get(name))}")
    if len(recorded) != len(replayed):
        return f"{len(recorded)} decisions recorded, {len(replayed)} replayed"
    return None


def _compact(decisions: list[dict[str, Any]]) -> str:
    return json.dumps(decisions, separators=(",", ":"))


def check(run_dir: str | Path,
          progress: Callable[[int, int], None] | None = None) -> tuple[int | None, int | None]:
    """Check the invariants a record can show (rlix.policy.run_checks) on the tables of
    `run_dir`, and each table against what the event log says happened
    (rlix.runs.crosscheck); return the allocation and rollout rows checked, None for a table
    the folder was written without (`--tables`). Raises InvariantViolation or TableMismatch.

    The rollouts table can hold 10^8 attempts (a simulated day of a large cluster): it is
    checked one pipeline at a time (from Parquet, only that pipeline's rows, conformed to the
    table's schema, then only the columns the checks read), sorted by trajectory and turned into rows a slice at a time, so only one
    slice of rows and one trajectory's attempts are Python objects at once. `progress`, if
    given, is called with the rollout rows checked and the table's rows after each pipeline
    (the rollouts are most of a check's time: 3 min on lab-day-1024's 18.6M attempts)."""
    run = load(run_dir)
    tally = tally_of_whole_log(run)
    api = run.summary.get("api_pipelines")
    tally.untracked = frozenset(map(str, api)) if isinstance(api, list) else frozenset()
    num_allocations = num_rollouts = None
    if _has_table(run, "allocations"):
        allocations = _rows(run.allocations)
        check_allocations(allocations, run.specs, run.facts.spec_at)
        num_allocations = len(allocations)
        allocations_agree(run.allocations, tally)
    if _has_table(run, "rollouts"):
        counted = [0]
        consumed: set[StepKey] = set()
        closing: list[pd.DataFrame] = []
        rows = _rows_by_trajectory(run, counted, consumed, closing, progress)
        check_rollouts(rows, run.specs, grouped_by_trajectory=True)
        num_rollouts = counted[0]
        rollouts_agree(consumed, tally)
        end_s = max(float(run.summary.get("makespan_s") or 0.0), tally.last_now or 0.0)
        for part in closing:
            closings_agree(part, tally, end_s)
    for name, agree in _AGREE.items():
        if _has_table(run, name):
            agree(getattr(run, name), tally)
    return num_allocations, num_rollouts


def tally_of_whole_log(run: Run) -> EventTally:
    """The tally of `run`'s event log, RunError (exit 2, as `replay` says it) if the log ends
    before what summary.json says of the run's end: a log cut short is bad input, and every
    table held to it would seem to disagree (or, read for figures, give those of part of the
    run without a word)."""
    events = run.path / EVENTS_FILE
    tally = tally_file(events)
    log_reaches_summary(tally, run.summary, events, tally.last_line or 1)
    return tally


#: The other tables' comparisons with the event log (rlix.runs.crosscheck).
_AGREE: dict[TableName, Callable[[pd.DataFrame, EventTally], None]] = {
    "steps": steps_agree, "waits": waits_agree, "activity": activity_agrees, "jobs": jobs_agree,
}


def _has_table(run: Run, name: TableName) -> bool:
    return any(table_path(run.path, name, fmt).exists() for fmt in ("parquet", "csv"))


#: Rollout rows turned into Python mappings at a time by `check`.
CHECK_SLICE_ROWS = 1 << 20
#: Rollout rows `check` reads from Parquet at a time, whole pipelines (a pipeline with more is
#: read alone; one of a simulated day of cluster-1024 has about 5.7M).
CHECK_BATCH_ROWS = 1 << 21
#: The rollout columns the checks read.
_CHECKED_COLUMNS = ["pipeline_id", "adapter", "trajectory_id", "step_consumed", "weight_version",
                    "status", "t_start"]


def _rows_by_trajectory(run: Run, counted: list[int], consumed: set[StepKey], closing: list[pd.DataFrame],
                        progress: Callable[[int, int], None] | None = None) -> Iterator[dict[str, Any]]:
    """The rows of each pipeline in turn, each trajectory's attempts one after another;
    `counted[0]` counts them, `consumed` gets the steps their completed attempts fed and
    `closing` the rows that close a trajectory not completed (after the invariant checks saw
    the pipeline's rows, so a broken row is theirs to report). `progress(rows checked, rows
    in all)` after each pipeline."""
    total = _rollout_rows(run) if progress is not None else 0
    for part in _rollouts_by_pipeline(run):
        part = part.sort_values(["adapter", "trajectory_id", "t_start"], kind="stable")
        counted[0] += len(part)
        for lo in range(0, len(part), CHECK_SLICE_ROWS):
            yield from _rows(part.iloc[lo : lo + CHECK_SLICE_ROWS])
        consumed |= completed_steps(part)
        closing.append(part[part["status"].isin(CLOSING)])
        if progress is not None:
            progress(counted[0], total)


def _rollout_rows(run: Run) -> int:
    """The rows of `run`'s rollouts table: a Parquet file's count from its footer."""
    path = table_path(run.path, "rollouts", "parquet")
    if not path.exists():
        return len(run.rollouts)
    import pyarrow.parquet as pq

    try:
        return int(pq.ParquetFile(path).metadata.num_rows)
    except (OSError, ValueError) as error:  # pyarrow's errors derive from these
        raise RunError(f"cannot read the rollouts for checking: {error}", file=path) from error


def _rollouts_by_pipeline(run: Run) -> Iterator[pd.DataFrame]:
    """Each pipeline's rollout rows (the checked columns), in order of pipeline id, conformed
    to the table's schema as any table read is (`conform_table`): a missing column or a bad
    value is the one line naming the file that `run.rollouts` gives, not a TypeError deep in
    the checks. Read from Parquet a batch of pipelines at a time (`_batches`): a filtered read
    scans the whole file, so a read per pipeline made a run of a thousand jobs read its table
    a thousand times."""
    path = table_path(run.path, "rollouts", "parquet")
    if not path.exists():  # CSV tables: read whole (nobody writes 10^8 rows as CSV)
        yield from (part for _pid, part in run.rollouts.groupby("pipeline_id", sort=True, observed=True))
        return
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except (OSError, ValueError) as error:  # pyarrow's errors derive from these
        raise RunError(f"cannot read the rollouts for checking: {error}", file=path) from error
    conform_table(schema.empty_table().to_pandas(), "rollouts", path)  # its columns, before any row is read
    columns = list(TABLE_COLUMNS["rollouts"])
    for batch in _batches(_pipeline_rows(pq, path), CHECK_BATCH_ROWS):
        try:
            part = pd.read_parquet(path, columns=columns, filters=[("pipeline_id", "in", batch)])
        except (OSError, ValueError, KeyError) as error:
            raise RunError(f"cannot read the rollouts for checking: {error}", file=path) from error
        try:
            part = conform_table(part, "rollouts", path)
        except TraceError as error:
            if error.row is None:
                raise
            # The row of the file, not of this batch's rows: what a user opening it looks for.
            row = _file_row(pq, path, batch, error.row)
            raise TraceError(error.message, file=path, row=row, column=error.column) from error
        positions = part.groupby(part["pipeline_id"].astype(str), sort=False).indices
        checked = part[_CHECKED_COLUMNS]
        for pipeline_id in batch:
            yield checked.iloc[positions.get(pipeline_id, [])]


def _batches(rows: dict[str, int], budget: int) -> Iterator[list[str]]:
    """The pipeline ids of `rows` (id: its row count) in order, cut into runs of at most
    `budget` rows (a pipeline with more is a batch of its own)."""
    batch: list[str] = []
    size = 0
    for pipeline_id, count in rows.items():
        if batch and size + count > budget:
            yield batch
            batch, size = [], 0
        batch.append(pipeline_id)
        size += count
    if batch:
        yield batch


def _file_row(pq: Any, path: Path, batch: list[str], part_row: int) -> int:
    """The 1-based row of the rollouts file at `path` that is row `part_row` (1-based) of the
    rows of the pipelines in `batch` (read filtered, in file order). Found only for an
    error's message."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = pq.read_table(path, columns=["pipeline_id"]).column(0).cast("string")
    return int(pc.indices_nonzero(pc.is_in(ids, value_set=pa.array(batch, pa.string())))[part_row - 1].as_py()) + 1


def _pipeline_rows(pq: Any, path: Path) -> dict[str, int]:
    """The pipelines of the rollouts table at `path` (a Parquet file), in order, with their
    row counts."""
    import pyarrow.compute as pc

    try:
        ids = pq.read_table(path, columns=["pipeline_id"]).column(0).cast("string")
    except (OSError, ValueError, KeyError) as error:
        raise RunError(f"cannot read the rollouts for checking: {error}", file=path) from error
    counts = pc.value_counts(ids).to_pylist()
    return {str(c["values"]): int(c["counts"]) for c in sorted(
        (c for c in counts if c["values"] is not None), key=lambda c: str(c["values"]))}


def _rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Plain records with None for missing values (pandas' NA has no truth value)."""
    records: list[dict[str, Any]] = frame.astype(object).where(frame.notna(), None).to_dict("records")
    return records
