"""The run folder: what a finished run leaves behind, the same for the simulator and the executor.

`write_run` turns a finished `Recorder` into:

    summary.json       the figures of rlix.runs.metrics
    scenario.yaml      the resolved scenario, as given
    events.jsonl       a header, then every event handed to the core with its decisions
    allocations, steps, rollouts, activity, waits   .parquet (or .csv), via rlix.traces.tables
    jobs                                          one row per pipeline (rlix.runs.jobs)
    timeline.json      Chrome trace event format (rlix.runs.timeline)
    gantt.png, utilization.png, step_times.png      (rlix.runs.plots)

Everything is checked and written into a hidden sibling folder first and moved into place at
the end, so a failure leaves no half-written run behind.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rlix.policy.specs import PipelineSpec
from rlix.runs.errors import RunError
from rlix.runs.eventlog import EVENTS_FILE
from rlix.runs.frames import RunTables, tables_from_recorder
from rlix.runs.jobs import job_rows
from rlix.runs.metrics import summary
from rlix.runs.paths import check_out_dir, new_folder, put_in_place
from rlix.runs.recorder import Recorder
from rlix.runs.timeline import write_timeline
from rlix.runs.totals import RunTotals
from rlix.traces.schema import TABLE_NAMES
from rlix.traces.tables import TableFormat, write_table

SUMMARY_FILE, SCENARIO_FILE, TIMELINE_FILE = "summary.json", "scenario.yaml", "timeline.json"
FORMATS: tuple[TableFormat, ...] = ("parquet", "csv")


def write_run(
    recorder: Recorder,
    out_dir: str | os.PathLike[str],
    *,
    scenario_yaml: str,
    specs: Mapping[str, PipelineSpec] | None = None,
    format: TableFormat = "parquet",
    plots: bool = True,
    overwrite: bool = False,
    extra_summary: Mapping[str, Any] | None = None,
    tables: RunTables | None = None,
    alone_s: Mapping[str, float] | None = None,
    run_state: Mapping[str, Any] | None = None,
    folders: Mapping[str, Path] | None = None,
    figures: dict[str, Any] | None = None,
) -> Path:
    """Write the run folder of a finished recorder (`finish` called) and return its path.

    `specs` give each pipeline's kind and staleness bound for the summary; by default they are
    taken from the pipelines registered in the event log. An existing, non-empty `out_dir` is
    replaced only with `overwrite=True`, and only if it is a run folder (`rlix.runs.paths`).
    Raises RunError (or TraceError for a table that breaks
    its schema) before anything is written. `tables`, when the caller has them already
    (`tables_from_recorder` of this recorder), are written as they are rather than built again:
    a large run's rollouts table is gigabytes. `run_state` is how a live run ended
    (`finished`, `stop_reason`, `faults`, and `states`: pipeline -> (state, reason)); a run
    without one finished. `folders` are moved into the run folder under their names (the
    executor's trained `models`), last, so a failure before leaves them where they were.
    `figures`, when the caller has them already (`run_figures` of these tables, extras and
    state), are summary.json as they are: a large run's figures take a while.
    """
    if recorder.sink is not None:  # its folder is mostly written: complete it
        from rlix.runs.stream import finish_streamed

        return finish_streamed(recorder, scenario_yaml=scenario_yaml, specs=specs, plots=plots,
                               overwrite=overwrite, extra_summary=extra_summary, alone_s=alone_s)[0]
    out_dir = check_run_out(out_dir, overwrite, format, plots)
    if not recorder.finished:  # holdings still open: finish() closes them
        raise RunError("the recorder is not finished: call recorder.finish(now) first")
    built = tables if tables is not None else tables_from_recorder(recorder, dict(specs) if specs is not None else None)
    if figures is None:
        figures = run_figures(built, recorder, alone_s=alone_s, extra_summary=extra_summary, run_state=run_state)

    def write(staging: Path) -> None:
        _write_all(staging, recorder, built, figures, scenario_yaml, format, plots)
        write_table(job_rows(built, alone_s), staging, "jobs", format)

    _write_staged(out_dir, write, folders or {})
    return out_dir


def _write_staged(out_dir: Path, write: Callable[[Path], None], folders: Mapping[str, Path]) -> None:
    """Run `write` into a staging folder beside `out_dir`, move `folders` in, then put it in
    `out_dir`'s place: a failure anywhere leaves `out_dir` as it was and `folders` where they
    were."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = new_folder(out_dir.parent, f".{out_dir.name}.")
    moved: list[tuple[Path, Path]] = []
    try:
        write(staging)
        for name, folder in folders.items():
            shutil.move(str(folder), str(staging / name))
            moved.append((staging / name, Path(folder)))
        put_in_place(staging, out_dir)
    except BaseException:
        for inside, origin in moved:  # what was the caller's goes back before the staging goes
            shutil.move(str(inside), str(origin))
        shutil.rmtree(staging, ignore_errors=True)
        raise


def check_run_out(out_dir: str | os.PathLike[str], overwrite: bool = False, format: str = "parquet",
                  plots: bool = True) -> Path:
    """The run folder `write_run` would write, checked as it checks it (RunError): a caller
    about to run for hours checks first, and nothing is lost to a typo at the end."""
    out = check_out_dir(out_dir, overwrite)
    check_table_format(format)
    if plots and importlib.util.find_spec("matplotlib") is None:
        raise RunError("plots need matplotlib (pip install 'rlix[sim]'); or write the run without plots")
    return out


def check_table_format(format: str) -> TableFormat:
    """`format` as a table format (RunError if it is none)."""
    if format in FORMATS:
        return format
    raise RunError(f"tables are written as {' or '.join(FORMATS)}, not {format!r}")


def run_figures(tables: RunTables, recorder: Recorder, *, alone_s: Mapping[str, float] | None = None,
                extra_summary: Mapping[str, Any] | None = None, run_state: Mapping[str, Any] | None = None,
                totals: RunTotals | None = None) -> dict[str, Any]:
    """summary.json of a finished run: the figures of its tables (`rlix.runs.metrics.summary`,
    with the recorder's prefetches, which the tables do not hold), the driver's extras, and
    how it ended. The one assembly of write_run, a streamed run's finish and the simulator's
    result, so what a caller is handed is what the folder holds."""
    figures = summary(tables, alone_s=alone_s, totals=totals, prefetch_s=recorder.prefetch_s)
    figures.update(extra_summary or {})
    _add_run_state(figures, run_state or {})
    return figures


def _add_run_state(figures: dict[str, Any], state: Mapping[str, Any]) -> None:
    """How the run ended, at the top of the summary, and each pipeline's final state. What
    `state` does not say, the figures may (a simulator run's `finished`, from its extras)."""
    figures["finished"] = bool(state.get("finished", figures.get("finished", True)))
    figures["stop_reason"] = state.get("stop_reason", figures.get("stop_reason"))
    figures["faults"] = list(state.get("faults", figures.get("faults", [])))
    for pipeline_id, (name, reason) in state.get("states", {}).items():
        if pipeline_id in figures.get("pipelines", {}):
            figures["pipelines"][pipeline_id].update({"state": name, "state_reason": reason})


def _write_all(folder: Path, recorder: Recorder, tables: RunTables, figures: dict[str, object],
               scenario_yaml: str, format: TableFormat, plots: bool) -> None:
    (folder / SUMMARY_FILE).write_text(json.dumps(figures, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    (folder / SCENARIO_FILE).write_text(scenario_yaml, encoding="utf-8")
    with (folder / EVENTS_FILE).open("w", encoding="utf-8") as handle:
        for line in recorder.event_lines:
            handle.write(line)
            handle.write("\n")
    for name in TABLE_NAMES:
        write_table(tables.table(name), folder, name, format)
    write_extras(tables, folder, plots)


def write_extras(tables: RunTables, folder: Path, plots: bool) -> None:
    """The timeline and, with `plots`, the plots of a run into `folder`."""
    write_timeline(tables, folder / TIMELINE_FILE)
    if plots:
        from rlix.runs.plots import write_plots

        write_plots(tables, folder)
