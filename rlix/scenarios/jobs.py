"""A job log as the arrivals of a scenario: `--jobs FILE` or `jobs: {path, columns}`.

The file (CSV, JSON Lines or Parquet, read as traces are) has one row per job with columns
`id`, `template` (a name in the scenario's `templates:`) and `arrival`: seconds from the start,
or timestamps (a Slurm `sacct` Submit column, an AcmeTrace `submit_time`), counted from the
first. Any other column named like a pipeline field (`steps`, `max_staleness`,
`prompts_per_step`, ...) overrides the template for that job (a blank keeps the template's).
A column map (`--jobs-column arrival=Submit`, `columns:` in the scenario) names where each
comes from, so a foreign log is read as it is. Each row becomes a pipeline
`{**template, **overrides, id, arrival_s}` after the scenario's own pipelines. In a CSV file
the id and template columns are read as written ("01", "NA" and "nan" are those strings).

Bad input is one error (a TraceError) naming the file, and the line (a CSV or JSON Lines file)
or row and the column where there is one: no such file, a missing column, a blank id,
template or arrival, an unknown template, a negative or unparseable arrival, an id given twice
or already a pipeline's, an override a pipeline would refuse, an empty log.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rlix.scenarios.errors import NO_VALUE, FieldProblem, format_path, format_value
from rlix.scenarios.pipelines import PipelineConfig
from rlix.traces.columns import apply_column_map
from rlix.traces.errors import TraceError
from rlix.traces.io import format_of, read_frame
from rlix.traces.validate import Where, locate

REQUIRED = ("id", "template", "arrival")
#: Pipeline fields a job log may override per job.
OVERRIDES = tuple(name for name in PipelineConfig.model_fields if name not in ("id", "arrival_s", "adapters"))


@dataclass(frozen=True)
class Job:
    """One row of a job log: its fields (id, template, arrival_s, overrides), where it is in
    the file, and the file's name of each of its columns (a column map's source)."""

    fields: dict[str, Any]
    where: Where
    columns: dict[str, str]

    def error(self, path: str | Path, message: str, column: str | None = None) -> TraceError:
        """A TraceError at this row (and at `column`, rlix's name of it, if given)."""
        name = None if column is None else self.columns.get(column, column)
        return TraceError(message, file=path, column=name, **self.where)


def read_jobs(path: str | Path, columns: dict[str, str] | None = None) -> list[Job]:
    """The log's jobs, in file order (TraceError)."""
    columns = dict(columns or {})
    for target in columns:
        if target not in REQUIRED and target not in OVERRIDES:
            raise TraceError(f"jobs column map target {target!r} is not one of {', '.join(REQUIRED + OVERRIDES)}")
    frame = apply_column_map(_read_log(path, columns), columns, file=path)
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise TraceError(f"the job log has no column {', '.join(missing)} (map one with --jobs-column "
                         f"{missing[0]}=SOURCE; columns are: {', '.join(map(str, frame.columns))})", file=path)
    if frame.empty:
        raise TraceError("the job log has no rows", file=path)
    for name in REQUIRED:  # a blank is no id, template or arrival (pandas reads it as NaN)
        blank = frame[name].map(_blank)
        if blank.any():
            position = int(blank.to_numpy().argmax())
            raise TraceError("missing value", file=path, column=columns.get(name, name),
                             **locate(frame.index, position))
    arrivals = _arrivals(frame["arrival"], path, columns.get("arrival", "arrival"))
    extra = [c for c in frame.columns if c in OVERRIDES]
    jobs = []
    for position, ((_label, record), arrival) in enumerate(zip(frame.iterrows(), arrivals, strict=True)):
        fields = {"id": _text(record["id"]), "template": _text(record["template"]), "arrival_s": arrival}
        for column in extra:
            value = _plain(record[column])
            if _blank(value):
                continue  # the template's value
            # a column with blanks is read as floats: 3.0 steps is 3
            fields[column] = int(value) if isinstance(value, float) and value.is_integer() else value
        jobs.append(Job(fields, locate(frame.index, position), columns))
    return jobs


def _read_log(path: str | Path, columns: dict[str, str]) -> pd.DataFrame:
    """The file as read_frame reads it; in a CSV file the id and template columns as text, as
    written (pandas would read "01" as 1 and "NA" or "nan" as missing), only a blank missing."""
    frame = read_frame(path)
    if format_of(path) != "csv":
        return frame
    names = [source for source in (columns.get("id", "id"), columns.get("template", "template"))
             if source in frame.columns and frame.columns.tolist().count(source) == 1]
    if not names:
        return frame
    try:
        text = pd.read_csv(path, usecols=names, dtype=str, keep_default_na=False,
                           na_values=dict.fromkeys(names, [""]))
    except (ValueError, OSError, pd.errors.ParserError):
        return frame  # read_frame has read it: a dialect this second read does not follow
    if len(text) != len(frame):
        return frame
    frame = frame.copy()
    for name in names:
        frame[name] = text[name].to_numpy()
    return frame


def _blank(value: Any) -> bool:
    """A missing value: None, NaN, NaT or an empty (or all blank) string."""
    if isinstance(value, str):
        return not value.strip()
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False  # a list or an array: a value


def _text(value: Any) -> str:
    """An id or template name as text: 7.0 (a float column) is "7"."""
    value = _plain(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


#: The least first arrival in seconds read as Unix times, not an offset (2001-09-09; 31.7 years).
UNIX_TIME_LIKE_S = 1e9


def _arrivals(column: pd.Series, path: str | Path, name: str) -> list[float]:
    """Seconds from the start: numbers as they are (>= 0), timestamps from the first."""
    numbers = pd.to_numeric(column, errors="coerce")
    if numbers.notna().all():
        bad = (numbers < 0) | ~numbers.map(math.isfinite)
        if bad.any():
            position = int(bad.to_numpy().argmax())
            raise TraceError(f"{format_value(_plain(column.iloc[position]))} is not seconds >= 0", file=path,
                             column=name, **locate(column.index, position))
        if numbers.min() >= UNIX_TIME_LIKE_S:
            # Seconds are kept as they are (a log may start its first job late on purpose), but
            # no log means its first job 31 years in: these are Unix times, which would leave
            # the pool idle that long and the run's per-hour figures near 0.
            position = int(numbers.to_numpy().argmin())
            raise TraceError(f"{format_value(_plain(column.iloc[position]))} s: arrivals in seconds count from the "
                             "run's start, so no job would arrive for over 31 years (Unix times? give them as "
                             "timestamps, which count from the first, or subtract the first)", file=path,
                             column=name, **locate(column.index, position))
        return [float(v) for v in numbers]
    times = pd.to_datetime(column, errors="coerce", utc=True, format="mixed")
    if times.isna().any():
        position = int(times.isna().to_numpy().argmax())
        raise TraceError(f"{format_value(_plain(column.iloc[position]))} is neither seconds nor a timestamp "
                         "(a log's arrivals are all one or all the other)", file=path, column=name,
                         **locate(column.index, position))
    first = times.min()
    return [float((t - first).total_seconds()) for t in times]


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def job_pipelines(
    jobs: list[Job],
    templates: dict[str, dict[str, Any]],
    path: str | Path,
    taken: dict[str, str],
    check: Callable[[dict[str, Any]], None],
) -> list[dict[str, Any]]:
    """Pipelines from `jobs` (see the module docstring), each checked by `check` (a FieldProblem
    at a path relative to the pipeline); `taken` maps the ids other pipelines have to where
    they are, and gets the jobs' ids. TraceError at the job's row: an unknown template, an id
    given twice, a pipeline `check` refuses."""
    out = []
    for job in jobs:
        template = templates.get(job.fields["template"])
        if template is None:
            raise job.error(path, f"{job.fields['template']!r}: unknown template "
                            f"(known: {', '.join(templates) or 'none: the scenario has no templates:'})",
                            "template")
        pipeline_id = job.fields["id"]
        if pipeline_id in taken:
            also = taken[pipeline_id].removeprefix(f"{path}, ")  # a row of this log: its line
            raise job.error(path, f"{pipeline_id!r}: duplicate pipeline id (also {also})", "id")
        pipeline = {**template, **{k: v for k, v in job.fields.items() if k != "template"}}
        try:
            check(pipeline)
        except FieldProblem as problem:
            head = problem.path[0] if problem.path else None
            if head in job.fields:  # the job's own value: its column
                value = "" if problem.value is NO_VALUE else format_value(problem.value)
                what = f"{format_path(problem.path)}={value}" if len(problem.path) > 1 else value
                raise job.error(path, f"{what}: {problem.problem}" if what else problem.problem,
                                "arrival" if head == "arrival_s" else str(head)) from None
            raise job.error(path, f"job {pipeline_id!r}, template {job.fields['template']!r} with this row's "
                            f"overrides: {problem}") from None
        taken[pipeline_id] = _where_text(path, job.where)
        out.append(pipeline)
    return out


def _where_text(path: str | Path, where: Where) -> str:
    if "line" in where:
        return f"{path}, line {where['line']}"
    return f"{path}, row {where.get('row')} (1-based)"
