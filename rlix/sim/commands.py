"""`rlix-sim run` and `rlix-sim compare`: the simulator's main commands."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

from rlix.policy import POLICIES
from rlix.runs.paths import missing_parents, remove_if_empty
from rlix.runs.progress import sim_progress
from rlix.runs.tablechoice import TABLE_CHOICES, tables_option
from rlix.sim.choices import policy_names
from rlix.sim.compare_out import check_compare_out
from rlix.traces.bundled import bundled_names
from rlix.traces.options import UsageError, non_negative_int, path_text, positive_number

RUN_HELP = """\
Replay a scenario on the simulated cluster under one policy and write the run folder:
summary.json, scenario.yaml, events.jsonl, the allocations, steps, rollouts, activity, waits
and jobs tables (Parquet, or --format csv), timeline.json (open in Perfetto or
chrome://tracing) and PNG plots, and prints the run's figures and its pipelines. The event log
and the holdings are written as the run goes; --tables keeps only the tables named (the
summary is the same), so a long run (--days 7) fits in little memory:

  rlix-sim run cluster-1024 --days 7 --tables steps --no-alone --out runs/week

SCENARIO is a bundled name (agentic-4x32, mixed-lora, math-rlvr, cluster-1024, tiny, ...) or a
path to a scenario YAML file. Example:

  rlix-sim run agentic-4x32 --policy rlix --out runs/agentic
"""

COMPARE_HELP = """\
Run every policy on the same scenario, trace and seed; print three tables of the policies
(jobs: throughput, JCT, queueing and slowdown; GPU time: busy/loading/idle shares over the run,
while every pipeline is active and while jobs wait to start; steps and moves: step times,
preemptions, recomputed tokens), the ceiling
and JCT floor lines and a table of each policy's pipelines, and write two plots (compare.png:
the policies side by side; jobs.png: JCT CDF and queue length; not with --json) beside a run
folder per policy. Each pipeline is also run alone on its home GPUs (for slowdowns) and alone
with every GPU its mappings allow (its unshared rate). Two slowdowns: "mean/p95 slowdown" are
the jobs' (JCT over JCT alone on the home, as in summary.json and `rlix-sim jobs`: queueing and inits count); "step slowdown" (per
pipeline) and "max step slowdown" are a pipeline's mean step time over its mean step time
alone on its home (sharing's cost to a running step only). mean_wait_s: a pipeline's mean
wait from a cluster request to its grant. The ceiling is the steps per hour sharing could reach at best: total steps
over the longest of the makespans no policy beats, every pipeline at its unshared rate from
its arrival, the pool's GPUs doing the work no packing avoids (gang stages and the least decode
time of the rollouts), the gang stages on more than half the pool one after another, and,
when every init is on more than half the pool, the inits one after another and then the last
one's steps at its unshared rate (in practice: a pipeline's own weight moves can put it
slightly above its unshared rate). The JCT floor is the mean JCT no policy beats, the highest
of: each job's unshared duration (the critical paths), the pool's GPUs serving the
work no packing avoids shortest remaining first (the work in turn), and, when every init is on
more than half the pool, the inits served so, each job then running its unshared time after
them; each policy's mean JCT is given over it. Per
pipeline, steps_per_h is over its own time in the run (arrival to last step).
Example:

  rlix-sim compare agentic-4x32
"""

DEMO_HELP = """\
`rlix-sim compare` on a small bundled scenario, `tiny` unless named: two pipelines (one
full-finetune, one multi-LoRA) on one node of 4 GPUs under every policy, in seconds. Takes every
option of `compare`. Examples:

  rlix-sim demo                        # tiny, every policy
  rlix-sim demo blog-4on12 --policies rlix,static

For the main study:

  rlix-sim compare agentic-4x32
"""


def _out_folder(text: str) -> str:
    """--out of run and compare: a folder the output replaces as a whole (it is written beside
    the folder and renamed into place), so never the current folder or one that holds it: `--out
    .` ran the whole simulation and then found its own staging folder in the way."""
    path_text(text)
    here = os.path.realpath(os.getcwd())
    target = os.path.realpath(text)
    if here == target or here.startswith(target.rstrip(os.sep) + os.sep):
        raise argparse.ArgumentTypeError(
            f"{text!r} is the current folder or holds it, which the output would replace as a "
            f"whole; name a folder in it (e.g. --out {os.path.join(text, 'NAME')})")
    return text


def _column(text: str) -> tuple[str, str]:
    name, sep, source = text.partition("=")
    if not sep or not name or not source:
        raise argparse.ArgumentTypeError(
            f"expected NAME=SOURCE (e.g. response_tokens=GeneratedTokens), got {text!r}"
        )
    return name, source


def _add_common(parser: argparse.ArgumentParser, default_scenario: str | None = None) -> None:
    if default_scenario is None:
        parser.add_argument(
            "scenario", metavar="SCENARIO", help="a bundled scenario name or a YAML path"
        )
    else:
        parser.add_argument(
            "scenario",
            metavar="SCENARIO",
            nargs="?",
            default=default_scenario,
            help=f"a bundled scenario name or a YAML path (default {default_scenario})",
        )
    parser.add_argument(
        "--trace",
        metavar="FILE",
        help="replay this trace for every pipeline: a file (CSV, JSONL or Parquet) or a bundled "
        f"trace's name ({', '.join(bundled_names())})",
    )
    parser.add_argument(
        "--column",
        metavar="NAME=SRC",
        action="append",
        type=_column,
        default=[],
        help="map a trace column, e.g. response_tokens=num_decode_tokens (repeatable)",
    )
    parser.add_argument(
        "--jobs",
        metavar="FILE",
        help="add the jobs of this log (CSV, JSONL or Parquet: id, template, arrival in seconds or "
        "timestamps, optional pipeline-field overrides) as pipelines of the scenario's templates",
    )
    parser.add_argument(
        "--jobs-column",
        metavar="NAME=SRC",
        action="append",
        type=_column,
        default=[],
        help="map a job log column, e.g. arrival=Submit or id=JobID (repeatable; --column maps the trace)",
    )
    parser.add_argument("--seed", type=non_negative_int, help="override the scenario's seed")
    parser.add_argument(
        "--costs", metavar="FILE",
        help="a calibrated cost file (rlix-sim calibrate) replacing the scenario's `costs` section",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def _scenario(args: argparse.Namespace) -> Any:
    from rlix.scenarios.errors import NO_VALUE, ScenarioError
    from rlix.sim.api import resolve_scenario
    from rlix.sim.stages import scenario_costs

    if args.column and not args.trace:
        raise UsageError("--column needs --trace")
    if args.jobs_column and not args.jobs:
        raise UsageError("--jobs-column needs --jobs")
    # Checked here so the error names the option, not the scenario line it overrides.
    for option, path in (("--trace", args.trace), ("--jobs", args.jobs), ("--costs", getattr(args, "costs", None))):
        if option == "--trace" and path in bundled_names() and not Path(path).exists():
            if args.column:
                raise UsageError(f"--column maps a trace file's columns; the bundled trace {path} has rlix's own")
            continue
        if path is None or Path(path).is_file():
            continue
        if Path(path).exists():
            raise UsageError(f"{option}: not a file: {path}")
        nor = f" (nor a bundled trace: {', '.join(bundled_names())})" if option == "--trace" else ""
        raise UsageError(f"{option}: no such file: {path}{nor}")
    try:
        scenario = resolve_scenario(
            args.scenario,
            getattr(args, "policy", None),
            args.trace,
            dict(args.column) or None,
            args.seed,
            jobs=args.jobs,
            jobs_columns=dict(args.jobs_column) or None,
            costs=getattr(args, "costs", None),
            max_time_s=_duration_s(args),
        )
        scenario_costs(scenario)  # checked now, before any run, and naming --costs if it gave them
        return scenario
    except ScenarioError as exc:
        if exc.path == "seed" and args.seed is not None:  # --seed's value, not the file's
            raise UsageError(f"--seed: {args.seed}: {exc.problem}") from None
        if exc.file is None and not exc.path:  # no file, no field (a name no scenario has):
            raise UsageError(exc.problem) from None  # not "<scenario>: ...", a placeholder
        name = _override_behind(exc.path, args)
        if name is None:
            raise
        # A file an option named is bad: the option and the file, not the scenario line it replaced.
        path = str(getattr(args, name))
        if exc.line is not None and exc.file == str(Path(path).resolve()):  # a line of that file
            value = exc.value if exc.has_value else NO_VALUE
            raise UsageError(f"--{name}: {ScenarioError(exc.problem, path, exc.line, exc.path, value)}") from None
        where = "" if path in exc.problem else f"{path}: "
        raise UsageError(f"--{name}: {where}{exc.problem}") from None


#: Scenario fields a file option replaces, by the option's name (--trace, --jobs, --costs).
_OVERRIDES = {
    "trace": re.compile(
        r"((pipelines\[\d+\]|templates\.[^.]+|stream\.arrivals\[\d+\])\.(adapters\[\d+\]\.)?)?trace(\.|$)"
    ),
    "jobs": re.compile(r"jobs(\.|$)"),
    "costs": re.compile(r"costs(\.|$)"),
}


def _override_behind(path: str, args: argparse.Namespace) -> str | None:
    """The name of the option whose file is at field `path` of the resolved scenario, if any."""
    for name, pattern in _OVERRIDES.items():
        if getattr(args, name, None) is not None and pattern.match(path):
            return name
    return None


def _duration_s(args: argparse.Namespace) -> float | None:
    """`--duration-s` or `--days` (argparse allows one), in simulated seconds; None when
    neither is given or the command has neither (compare)."""
    days: float | None = getattr(args, "days", None)
    if days is None:
        return getattr(args, "duration_s", None)
    if not math.isfinite(days * 86400.0):
        raise UsageError(f"--days: {days:g} days is more seconds than a number holds")
    return days * 86400.0


def _limit_text(args: argparse.Namespace) -> str:
    """What set a run's time limit, as `print_run` names it: the option that gave it, else the
    scenario's max_time_s."""
    if getattr(args, "days", None) is not None:
        return f"--days {args.days:g}"
    if getattr(args, "duration_s", None) is not None:
        return f"--duration-s {args.duration_s:g}"
    return "the scenario's max_time_s"


def run_main(args: argparse.Namespace) -> int:
    from rlix.runs.errors import RunError
    from rlix.runs.stream import open_sink
    from rlix.runs.tablechoice import ALL_TABLES
    from rlix.sim.api import collect, new_simulation
    from rlix.sim.report import print_run

    scenario = _scenario(args)
    out = Path(args.out) if args.out else Path("runs") / scenario.name / scenario.policy.name
    overwrite = args.out is None or args.overwrite
    created = missing_parents(out)
    try:
        try:  # before the run, which can take long, not after it
            sink = open_sink(out, args.tables or ALL_TABLES, args.format, overwrite)
        except RunError as error:
            raise UsageError(str(error)) from error
        try:
            sim = new_simulation(scenario, sink=sink)  # before the bar, so an error is a line of its own
            update, close = sim_progress(f"{scenario.name} [{scenario.policy.name}]", scenario.max_time_s,
                                         quiet=args.quiet)
            try:
                sim.run(sim.scenario.max_time_s, update)
            finally:
                close()
        except BaseException:
            sink.discard()
            raise
        if not args.quiet:
            # Tables, summary, timeline and plots: seconds for most runs, minutes for a day of a
            # large cluster, with no simulated clock to show.
            print(f"writing the run folder {out} ...", file=sys.stderr, flush=True)
        result = collect(sim, out=out, overwrite=overwrite, table_format=args.format, alone=not args.no_alone)
    except BaseException:
        remove_if_empty(created)
        raise
    print_run(scenario.name, result.summary, _limit_text(args), result.run_dir)
    print(f"run folder: {result.run_dir}")
    return 0


def compare_main(args: argparse.Namespace) -> int:
    import shutil

    from rlix.runs.paths import new_folder, put_in_place
    from rlix.sim.compare import compare, plot_comparison
    from rlix.sim.report import print_comparison

    scenario = _scenario(args)
    try:
        policies = policy_names(args.policies)
    except argparse.ArgumentTypeError as error:
        raise UsageError(f"--policies: {error}") from None
    out = Path(args.out) if args.out else Path("runs") / scenario.name / "compare"
    # A link to a compare folder: the folder it names is replaced, and the link still leads to it.
    place = Path(os.path.realpath(out)) if out.is_symlink() else out
    check_compare_out(place)
    bars: dict[str, Any] = {}

    def progress(label: str, t: float) -> None:
        if args.quiet or args.json:
            return
        if label not in bars:
            for other in bars.values():
                other[1]()
            bars.clear()
            bars[label] = sim_progress(f"{scenario.name} [{label}]", scenario.max_time_s)
        bars[label][0](t)

    # The whole compare is written into a hidden sibling and then takes the folder's place, so
    # the folder holds exactly this compare (no run folder of a policy it did not run), and a
    # compare that fails or is stopped midway leaves the earlier one whole.
    created = missing_parents(place)
    place.parent.mkdir(parents=True, exist_ok=True)
    try:
        staging = new_folder(place.parent, f".{place.name}.")
    except BaseException:
        remove_if_empty(created)
        raise
    try:
        try:
            comparison = compare(
                scenario, policies, out=staging, alone=not args.no_alone, progress=progress
            )
        finally:
            for _update, close in bars.values():
                close()
        if not args.json:
            from rlix.runs.jobs_plot import plot_jobs

            plot_comparison(comparison, staging / "compare.png")
            plot_jobs(comparison.summaries, staging / "jobs.png")
        check_compare_out(place)  # again: the compare may have taken hours, and the folder changed
        put_in_place(staging, place)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        remove_if_empty(created)
        raise
    comparison.run_dirs = {policy: out / policy for policy in comparison.run_dirs}
    if args.json:
        print(json.dumps(comparison.as_json(), sort_keys=True))
        return 0
    print_comparison(scenario, comparison)
    print(f"\nplots: {out / 'compare.png'}, {out / 'jobs.png'} (JCT CDF, queue length)\nrun folders: {out}/<policy>/")
    return 0


def register(commands: Any) -> None:
    run = commands.add_parser(
        "run",
        help="simulate a scenario under one policy and write its run folder",
        description=RUN_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_common(run)
    run.add_argument("--policy", choices=sorted(POLICIES), help="override the scenario's policy")
    run.add_argument(
        "--out",
        metavar="DIR",
        type=_out_folder,
        help="run folder (default runs/NAME/POLICY, NAME the scenario's name:; a run folder "
        "there is replaced)",
    )
    run.add_argument("--overwrite", action="store_true",
                     help="replace --out if it holds a run folder (a folder of anything else is refused)")
    run.add_argument(
        "--no-alone", action="store_true",
        help="skip the runs of each pipeline alone on its home (no alone_s or slowdown in the job figures)",
    )
    run.add_argument(
        "--format",
        choices=("parquet", "csv"),
        default="parquet",
        help="table format (default parquet)",
    )
    run.add_argument(
        "--tables",
        metavar="NAME,...",
        type=tables_option,
        help=f"the tables the run folder gets, of {','.join(TABLE_CHOICES)} (default all); the "
        "others are never kept in memory (summary.json, scenario.yaml and events.jsonl always)",
    )
    length = run.add_mutually_exclusive_group()
    length.add_argument("--duration-s", type=positive_number, metavar="S",
                        help="simulate this many seconds at most (overrides the scenario's max_time_s)")
    length.add_argument("--days", type=positive_number, metavar="D",
                        help="simulate this many days at most (--duration-s in days)")
    run.set_defaults(run=run_main)
    cmp = commands.add_parser(
        "compare",
        help="every policy on the same scenario: tables and plots",
        description=COMPARE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_compare_options(cmp)
    demo = commands.add_parser(
        "demo",
        help="`compare` on the bundled `tiny` scenario (seconds): a first look",
        description=DEMO_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_compare_options(demo, default_scenario="tiny")
    from rlix.sim.calibrate_cli import register as register_calibrate

    register_calibrate(commands)


def _add_compare_options(parser: argparse.ArgumentParser, default_scenario: str | None = None) -> None:
    _add_common(parser, default_scenario)
    parser.add_argument(
        "--policies",
        default="rlix,gap-ratio,static,static-backfill,sequential",
        help="comma-separated policies (default rlix,gap-ratio,static,static-backfill,sequential)",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        type=_out_folder,
        help="where run folders and the plots go (default runs/NAME/compare, NAME the scenario's name:), "
        "replaced as a whole at "
        "the end; a folder that is not empty must be one compare wrote, with nothing else in it",
    )
    parser.add_argument(
        "--no-alone", action="store_true",
        help="skip the runs of each pipeline alone (no slowdowns, no ceiling, no JCT floor)"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print {policy: {steps_per_hour, busy_share, idle_share, idle_share_all_active, idle_share_while_waiting,"
        " mean_step_s, preemptions, jobs: {experiments_per_hour, mean_jct_s, ...}, ceiling_steps_per_hour,"
        " makespan_bounds_s: {critical path, work, ...}, mean_jct_floor_s, mean_jct_bounds_s: {critical paths,"
        " work in turn, ...}}}: the same ceiling, floor and bounds under every policy",
    )
    parser.set_defaults(run=compare_main)
