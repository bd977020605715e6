"""`rlix-sim replay RUN_DIR` and `rlix-sim check RUN_DIR` verify a written run folder
(rlix.runs.verify: its decisions against a fresh core, its tables against its event log);
`rlix-sim jobs RUN_DIR` shows where its jobs' time went (rlix.runs.breakdown).

`register` adds the commands to a sub-command table (as rlix.traces.cli does). Exit status:
0 identical / all invariants hold and the tables agree with the log; 1 a divergence, a broken
invariant or a table that disagrees (printed); 2 bad input, a log cut short among it
(one line, ``rlix-sim: error: ...``; ``--traceback`` or ``RLIX_DEBUG=1`` shows the traceback).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from rlix.policy.errors import InvariantViolation
from rlix.runs.breakdown import GROUPINGS
from rlix.runs.errors import RunError
from rlix.traces.errors import TraceError
from rlix.traces.options import path_text, positive_number

if TYPE_CHECKING:
    import pandas as pd

    from rlix.runs.reader import Run

Command = Callable[[argparse.Namespace], int]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `replay`, `check` and `jobs` to the `rlix-sim` sub-command table."""
    _add_replay(subparsers)
    _add_check(subparsers)
    _add_jobs(subparsers)


def _add_replay(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    replay = subparsers.add_parser(
        "replay",
        help="replay a run's events through a fresh core and compare the decisions",
        description="Feed every event of RUN_DIR/events.jsonl to a new policy core built from "
        "the log's header and compare its decisions with the recorded ones, field by field. "
        "Prints the first divergence (line, event, recorded and replayed decisions) and exits 1, "
        "or exits 0 if every decision is identical. A log that ends before what summary.json "
        "says of the run's end (its steps, shrinks, grants, removals, makespan; whether it "
        "finished) was cut short: an error naming its last line (exit 2).",
        epilog="example: rlix-sim run tiny && rlix-sim replay runs/tiny/rlix (the folder run writes)",
    )
    replay.add_argument("run_dir", metavar="RUN_DIR", type=path_text,
                        help="a run folder written by rlix-sim or rlix-exec")
    replay.add_argument("--check-invariants", action="store_true",
                        help="also check the core's invariants after every round (slower)")
    _traceback_option(replay)
    replay.set_defaults(run=_guarded(main_replay))


def _add_check(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    check = subparsers.add_parser(
        "check",
        help="check a run's tables against the invariants a record can show",
        description="Check RUN_DIR's allocations and rollouts: one holder per GPU at a time, "
        "holdings that match their cluster's mapping or bundle, the staleness bound of every "
        "consumed trajectory, and no lost trajectory; and hold every table to what "
        "events.jsonl says happened (the holdings its applied grants and rank moves make, a "
        "wait per grant, its finished steps, trajectories consumed by each step trained, work "
        "only on GPUs held, one job row per pipeline, finished when the log removed it). Exits 1 on the first broken invariant "
        "or table that disagrees with the log; a log that ends before what summary.json says "
        "of the run's end was cut short: an error naming its last line (exit 2), as in replay.",
        epilog="example: rlix-sim run tiny && rlix-sim check runs/tiny/rlix (the folder run writes)",
    )
    check.add_argument("run_dir", metavar="RUN_DIR", help="a run folder", type=path_text)
    _traceback_option(check)
    check.set_defaults(run=_guarded(main_check))


def _add_jobs(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    jobs = subparsers.add_parser(
        "jobs",
        help="where a run's jobs spent their time: queueing, time above alone, training and rollout waits",
        description="Group RUN_DIR's jobs (a simulator or executor run folder) and show, per "
        "group, the mean wait to start, run time, JCT, time above the job's time alone on its "
        "home (what sharing cost it, waiting included) and that group's share of the time the "
        "run's jobs lost (excess_share: each job's excess where positive), and the waits for "
        "training GPUs inside it, by stage and by what held the job's home meanwhile (another "
        "job's training or init, rollout ranks moving), and the time its rollout had work left and "
        "no rank (rollout_wait); then what the rollout ranks' moves bought: "
        "their loads and offloads against the rollout they ran, and how many were cut before "
        "they had run as long as their moves took. Stream jobs (<template>-<n>) group by "
        "template; --by arrival shows bursts of arrivals. Each table ends with a row over every "
        "job, 'all' ('all jobs' when a group is itself named all). The rollout waits come "
        "from events.jsonl: a log cut short (it ends before what summary.json says of the "
        "run's end) is an error naming its last line (exit 2), as in replay and check.",
        epilog="example: rlix-sim run lab-day --out runs/lab && rlix-sim jobs runs/lab --by arrival",
    )
    jobs.add_argument("run_dir", metavar="RUN_DIR", help="a run folder", type=path_text)
    jobs.add_argument("--by", choices=GROUPINGS, default="name",
                      help="group by id less a trailing -<n> (name, default), per job (pipeline), "
                      "or by arrival time (arrival)")
    jobs.add_argument("--bin-s", type=positive_number, default=3600.0, metavar="S",
                      help="width of an arrival group in seconds (default 3600)")
    jobs.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    # An empty path is refused, not read as no plot asked for.
    jobs.add_argument("--plot", metavar="FILE", default=None, type=path_text,
                      help="also write a bar per group: the mean wait to start, the waits for "
                      "training GPUs and the rest of the run, marked at the time alone. The format "
                      "goes by the suffix (.png, .pdf, .svg, .jpg, ...: those matplotlib writes); "
                      "no suffix: .png is added; a folder (or a path ending in /) gets "
                      "FOLDER/jobs.png. Checked before any work; the file written is printed")
    _traceback_option(jobs)
    jobs.set_defaults(run=_guarded(main_jobs))


def main_replay(args: argparse.Namespace) -> int:
    from rlix.runs.progress import sim_progress
    from rlix.runs.reader import read_summary
    from rlix.runs.verify import replay

    try:  # the run's length, for the bar; a bad summary.json is replay's own error to give
        end_s: float | None = float(read_summary(Path(args.run_dir) / "summary.json")["makespan_s"])
    except (RunError, KeyError, TypeError, ValueError):
        end_s = None
    update, close = sim_progress(f"replay {Path(args.run_dir).name}", end_s)
    try:
        result = replay(args.run_dir, check_invariants=args.check_invariants, progress=update)
    finally:
        close()
    print(result)
    return 0 if result.identical else 1


def main_check(args: argparse.Namespace) -> int:
    from rlix.runs.crosscheck import TableMismatch
    from rlix.runs.progress import Progress, count_progress
    from rlix.runs.verify import check

    bar: list[Progress] = []  # made at the first pipeline checked, when the rows in all are known

    def progress(done: int, total: int) -> None:
        if not bar:
            bar.append(count_progress(total, "attempt", f"check {Path(args.run_dir).name}"))
        bar[0][0](done)

    try:
        num_allocations, num_rollouts = check(args.run_dir, progress)
    except (InvariantViolation, TableMismatch) as broken:
        print(f"{args.run_dir}: {broken}")
        return 1
    finally:
        for _update, close in bar:
            close()
    # Named, not only numbered: the numbers are the design's, which a user may never have read.
    held = [] if num_allocations is None else [
        f"one holder per GPU and exact mappings (1, 2) hold over {num_allocations} allocations"]
    if num_rollouts is not None:
        held.append(f"staleness bounds and no lost trajectory (7, 8) hold over {num_rollouts} rollout attempts")
    missing = [name for name, num in (("allocations", num_allocations), ("rollouts", num_rollouts)) if num is None]
    unchecked = f"not checked: {', '.join(missing)} (the folder was written without them)" if missing else ""
    print(f"{args.run_dir}: invariants {'; '.join(held + [unchecked] if unchecked else held)}; "
          "its tables agree with events.jsonl")
    return 0


def _rollout_waits(run: Run, holds: pd.DataFrame) -> pd.Series:
    """Each job's seconds with rollout work and no rollout rank (rlix.runs.rankless), from the
    event log: held to summary.json first, as `check` holds it, since a log cut short leaves
    rollouts open to the makespan and drops the later ones, figures that look like any other."""
    from rlix.runs.eventlog import events_path
    from rlix.runs.rankless import open_rollouts, rankless_by_job
    from rlix.runs.verify import tally_of_whole_log

    tally_of_whole_log(run)
    spans = open_rollouts(events_path(run.path), float(run.summary["makespan_s"]))
    return rankless_by_job(spans, holds)["rankless_s"]


def main_jobs(args: argparse.Namespace) -> int:
    from rlix.runs.text import format_table

    plot = None
    if args.plot:
        from rlix.runs.breakdown_plot import plot_path

        plot = plot_path(args.plot)  # a bad suffix or place fails here, before any work
    run, jobs, not_arrived = _arrived_jobs(args.run_dir)
    tables = _job_tables(run, jobs, args.by, args.bin_s)
    if plot is not None:
        from rlix.runs.breakdown_plot import plot_breakdown

        title = f"{Path(args.run_dir).name}: where jobs' time goes ({run.policy})"
        print(f"plot: {plot_breakdown(tables.groups, plot, title)}", file=sys.stderr)
    if args.json:
        print(json.dumps({"groups": _records(tables.groups), "stage_waits_s": _records(tables.stages),
                          "wait_causes_s": None if tables.causes is None else _records(tables.causes),
                          "rank_moves": None if tables.moves is None else _records(tables.moves)}))
        return 0
    seconds = {c: "{:,.0f}" for c in ("alone_s", "queueing_s", "run_s", "jct_s", "excess_s", "train_wait_s",
                                      "rollout_wait_s")}
    left_out = f" ({not_arrived} more had not arrived when the run ended: left out)" if not_arrived else ""
    print(f"{args.run_dir}: {len(jobs)} jobs{left_out}, policy {run.policy}; means per job, seconds; excess = JCT - "
          "alone on its home (waiting included); excess_share = share of the time jobs lost (excesses "
          "above 0); train_wait = waits for training GPUs once started; rollout_wait = time with rollout "
          "work and no rollout rank")
    print(format_table(tables.groups, {**seconds, "excess_share": "{:.0%}", "slowdown": "{:.2f}"}))
    waiting = _still_queueing(jobs, float(run.summary["makespan_s"]))
    if waiting:
        print(waiting)
    if tables.groups["alone_s"].isna().all():
        # A cut run's alone runs stop at the time each job had in it (summary.json's alone_s).
        print("(no times alone in this run, so no excess or slowdown: rlix-sim run simulates them "
              "unless --no-alone, and keeps none that did not end within the time a run cut short "
              "gave its job; a live run has none)")
    _print_waits(run, tables)
    _print_moves(tables.moves)
    return 0


def _arrived_jobs(run_dir: str) -> tuple[Run, pd.DataFrame, int]:
    """The run, its jobs that arrived before it ended, and how many had not."""
    from rlix.runs.reader import load

    run = load(run_dir)
    jobs = run.jobs  # the one table this needs: a RunError naming the tables kept
    if not len(jobs):  # every run has a row per pipeline: an emptied table, not a run of no jobs
        raise RunError("its jobs table has no rows: no job to show", file=run_dir)
    # A run cut before some jobs arrived lists them with no arrival: they have no figures, and
    # counted in they would pull every group's mean waits toward 0.
    not_arrived = int(jobs["arrival_s"].isna().sum())
    jobs = jobs[jobs["arrival_s"].notna()].reset_index(drop=True)
    if not len(jobs):
        raise RunError("no job arrived before the run ended: no job to show", file=run_dir)
    return run, jobs, not_arrived


class JobTables(NamedTuple):
    """What `rlix-sim jobs` shows; a table is None where the run kept none of what it needs."""

    groups: pd.DataFrame
    stages: pd.DataFrame
    causes: pd.DataFrame | None
    moves: pd.DataFrame | None


def _job_tables(run: Run, jobs: pd.DataFrame, by: str, bin_s: float) -> JobTables:
    from rlix.runs.breakdown import breakdown

    waits = run.waits if "waits" in run.kept_tables else None
    holds = run.allocations if "allocations" in run.kept_tables else None
    rollout_waits = None if holds is None else _rollout_waits(run, holds)
    groups, stages = breakdown(jobs, waits, by, bin_s, rollout_waits)
    causes = moves = None
    activity = run.activity if "activity" in run.kept_tables else None
    if waits is not None and activity is not None:
        from rlix.runs.wait_causes import wait_causes

        causes = wait_causes(jobs, waits, activity, by, bin_s, holds)
    if holds is not None and activity is not None:
        from rlix.runs.rank_moves import rank_moves

        moves = rank_moves(jobs, holds, activity, by, bin_s)
        # Its last row is over every job, labelled as the other tables label it.
        moves.loc[moves.index[-1], "group"] = groups["group"].iloc[-1]
    return JobTables(groups, stages, causes, moves)


def _print_waits(run: Run, tables: JobTables) -> None:
    from rlix.runs.text import format_table

    stages, causes = tables.stages, tables.causes
    if "waits" not in run.kept_tables:
        print("\nno waits table in this run (it was run with --tables): training waits unknown")
    elif len(stages.columns) > 1:
        # A job that reads its weights into host memory first (prefetch_s of summary.json)
        # asks for its init's GPUs only then: the init wait is its queueing less that read.
        print("\nwaits for GPUs per job, by stage (s; init's is from the init's request to its grant: "
              "the wait to start less any prefetch_s, the weights read before asking):")
        print(format_table(stages, {c: "{:,.1f}" for c in stages.columns if c != "group"}))
        if causes is not None:
            print("\ntraining waits per job, by what held the job's home meanwhile (s; another job's "
                  "training, init or idle hold first, then rollout ranks offloading, loading, running, "
                  "then nothing):")
            print(format_table(causes, {c: "{:,.1f}" for c in causes.columns if c != "group"}))
        else:
            print("\nno activity table in this run (it was run with --tables): what held the homes is unknown")
    else:
        print("\nno waits for training GPUs recorded")


def _still_queueing(jobs: Any, end_s: float) -> str | None:
    """A note for the jobs that arrived but had not started when the run ended (a run cut
    short): the means leave them out, so a group's queueing_s would read as if none waited."""
    queued = jobs[jobs["start_s"].isna() & jobs["finish_s"].isna()]
    if not len(queued):
        return None
    waited_s = end_s - queued["arrival_s"].astype(float)
    which = ", ".join(queued["pipeline_id"].astype(str).head(3)) + (", ..." if len(queued) > 3 else "")
    return (f"({len(queued)} job{'s' if len(queued) > 1 else ''} ({which}) had not started when the run ended at "
            f"{end_s:,.0f} s, after waiting {waited_s.mean():,.0f} s on average so far: left out of "
            f"queueing_s and of the waits below, which count granted requests only)")


def _print_moves(moves: Any) -> None:
    from rlix.runs.text import format_table

    if moves is None:
        print("\nno allocations or activity table in this run (it was run with --tables): rollout "
              "ranks' moves unknown")
        return
    print("\nrollout ranks' moves (a tenure: one hold of a rank's GPUs; per job: tenures, GPU-s of "
          "rollout and of loads + offloads; the median tenure; shares of the group's: moves in rank "
          "time, tenures that ran less rollout than their moves took, tenures whose GPUs a training "
          "or init cluster took at once):")
    print(format_table(moves, {"rank_tenures": "{:,.1f}", "median_tenure_s": "{:,.1f}", "rollout_gpu_s": "{:,.0f}",
                               "moves_gpu_s": "{:,.0f}",
                               **{c: "{:.0%}" for c in ("move_share", "unpaid_share", "cut_by_training")}}))


def _records(frame: Any) -> list[dict[str, Any]]:
    """The frame's rows as JSON objects (pandas writes NaN as null)."""
    records: list[dict[str, Any]] = json.loads(frame.to_json(orient="records"))
    return records


def _traceback_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--traceback", action="store_true",
                        help="on error, show the Python traceback (also: RLIX_DEBUG=1)")


def _guarded(command: Command) -> Command:
    """Bad input (an unreadable folder, log or table) is one line on stderr and status 2."""

    @functools.wraps(command)
    def guarded(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except (RunError, TraceError) as error:
            if args.traceback or os.environ.get("RLIX_DEBUG") == "1":
                raise
            print(f"rlix-sim: error: {error}", file=sys.stderr)
            return 2

    return guarded
