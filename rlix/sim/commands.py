"""`rlix-sim run`, `compare` and `demo`: what they do (their options and help texts: rlix.sim.command_args)."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

from rlix.runs.paths import missing_parents, remove_if_empty
from rlix.runs.progress import sim_progress
from rlix.sim.choices import policy_names
from rlix.sim.command_args import (
    COMPARE_HELP,
    DEMO_HELP,
    RUN_HELP,
    add_compare_options,
    add_run_options,
)
from rlix.sim.compare_out import check_compare_out
from rlix.traces.bundled import bundled_names
from rlix.traces.options import UsageError


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
    add_run_options(run)
    run.set_defaults(run=run_main)
    cmp = commands.add_parser(
        "compare",
        help="every policy on the same scenario: tables and plots",
        description=COMPARE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_compare_options(cmp)
    cmp.set_defaults(run=compare_main)
    demo = commands.add_parser(
        "demo",
        help="`compare` on the bundled `tiny` scenario (seconds): a first look",
        description=DEMO_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_compare_options(demo, default_scenario="tiny")
    demo.set_defaults(run=compare_main)
    from rlix.sim.calibrate_cli import register as register_calibrate

    register_calibrate(commands)
