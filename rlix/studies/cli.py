"""`rlix-sim sweep`: the command line of a sweep (rlix.studies.sweep)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from rlix.runs.progress import count_progress
from rlix.runs.tablechoice import TABLE_CHOICES, tables_option
from rlix.scenarios.source import load_yaml
from rlix.traces.options import UsageError, path_text

SWEEP_HELP = """\
Run a scenario over a grid of values (policies, seeds, any scenario field) as Ray tasks, one
row per point in DIR/results.parquet (the grid values and every figure of the point's
summary.json), with a plot of each metric against each axis but policy and seed in DIR/plots
(a line per policy; against seed when there is no other axis). Run it again into the same DIR
to resume: points already done are skipped, failed ones tried again. Locally by default
(--workers Ray workers, every listener on loopback); --address joins an existing Ray cluster.
Needs Ray: the exec extra (pip install -e '.[exec]').

A grid axis is KEY=V1,V2,...: KEY is policy, seed, or a dotted path into the scenario
(topology.num_nodes, pipelines.0.steps, pipelines.*.max_staleness for every pipeline,
policy.config.min_rebalance_interval_s, costs.load_s: any cost constant; any field, set in
the scenario or not, e.g. pipelines.*.runtime_estimate_s). Every
point (at most 10,000 a sweep) is checked before any runs. Values are YAML, split at the commas outside quotes and
brackets: a value holding a comma is quoted or bracketed (--grid 'pipelines.0.home="2-3,0-1",0-1',
--grid 'pipelines.0.clusters.actor_infer={tp: 1, gpus: pool},{tp: 2, gpus: pool}'); a value
given twice in an axis is refused. A sweep file (--file) may give `scenario:` (a relative path
is relative to the sweep file) and `grid: {KEY: [V1, V2]}` instead. Examples:

  rlix-sim sweep tiny --grid policy=rlix,static --grid seed=0,1,2 --out sweeps/tiny
  rlix-sim sweep agentic-4x32 --grid policy=rlix,gap-ratio,static \\
      --grid pipelines.*.max_staleness=0,1 --workers 2 --out sweeps/staleness
  rlix-sim sweep cluster-1024 --grid seed=0,1 --tables steps --out sweeps/days   # bounded memory
  rlix-sim sweep lab-day --grid policy=rlix,gap-ratio --grid costs.load_s=1,2,4 --out sweeps/wake
"""


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "sweep", help="run a scenario over a grid of values on Ray (one row per point)",
        description=SWEEP_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("scenario", metavar="SCENARIO", nargs="?",
                        help="a bundled scenario name or a YAML path (or `scenario:` in --file)")
    parser.add_argument("--grid", metavar="KEY=V1,V2", action="append", default=[],
                        help="one axis of the grid (repeat for more); values are YAML as in scenario files (1e9 is a "
                             "number), split at commas outside quotes and brackets (\"2-3,0-1\" is one value)")
    # Empty paths are refused, as the other commands refuse them: an empty --out was the
    # current folder, an empty --file no file at all.
    parser.add_argument("--file", metavar="SWEEP.yaml", type=path_text, help="a sweep file: scenario: and grid:")
    parser.add_argument("--out", metavar="DIR", required=True, type=_folder,
                        help="the sweep folder (new, or this sweep's, to resume)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="local Ray workers (default: the cores)")
    parser.add_argument("--address", metavar="HOST:PORT", type=_address, help="join this Ray cluster instead")
    parser.add_argument("--runs", action="store_true", help="keep each point's run folder in DIR/runs")
    parser.add_argument(
        "--tables", metavar="NAME,...", type=tables_option,
        help=f"stream each point's record to disk as it runs and keep only these tables, of "
             f"{','.join(TABLE_CHOICES)} (bounded memory for long points; with --runs the folders "
             f"keep them, else they go when the point is done)",
    )
    parser.add_argument("--no-plots", action="store_true", help="no plots")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(run=run)


def _folder(text: str) -> Path:
    """--out: a path, not empty."""
    return Path(path_text(text))


def _address(text: str) -> str:
    """--address: not empty (an empty one was tried as a cluster's address)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty address (give HOST:PORT, or leave --address out to run locally)")
    return text


def run(args: argparse.Namespace) -> int:
    from rlix.runs.errors import RunError
    from rlix.runs.paths import check_writable
    from rlix.scenarios import load_scenario
    from rlix.studies.grid import parse_grid
    from rlix.studies.plots import plot_sweep
    from rlix.studies.sweep import require_ray, run_sweep

    require_ray()  # before anything is read or written
    spec = read_sweep_file(args.file) if args.file else {}
    scenario_ref = args.scenario or spec.get("scenario")
    if not scenario_ref:
        raise UsageError("name a SCENARIO (or give `scenario:` in --file)")
    if args.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {args.workers}")
    try:
        check_writable(args.out)
    except RunError as error:
        raise UsageError(str(error)) from None
    grid = parse_grid(args.grid, spec.get("grid"))
    base = load_scenario(scenario_ref)
    grid.points(base)  # a bad axis is one line before anything else is shown
    update, close = count_progress(grid.num_points, "point", "sweep", quiet=args.quiet)
    try:
        result = run_sweep(base, grid, args.out, address=args.address, workers=args.workers,
                           keep_runs=args.runs, progress=lambda done, total: update(done), tables=args.tables)
    finally:
        close()
    if not args.no_plots:
        plot_sweep(result.rows, list(grid.axes), args.out / "plots")
    print(f"sweep {args.out}: {len(result.rows)} points ({result.num_run} run, {result.num_skipped} "
          f"already done, {result.num_failed} failed) in {result.wall_s:.1f} s; rows in "
          f"{args.out / 'results.parquet'}")
    if result.num_failed:  # the first failure's cause, so that a typo does not need the table opened
        failed = result.rows[result.rows["status"] != "ok"].iloc[0]
        print(f"first failed point {failed['point_id']}: {' '.join(str(failed['error']).split())}", file=sys.stderr)
    return 1 if result.num_failed else 0


def read_sweep_file(path: str) -> dict[str, Any]:
    """A sweep file's `scenario:` and `grid:`, read as scenario files are (1e9 is a number)."""
    try:
        data = load_yaml(Path(path).read_text(encoding="utf-8"))
    except OSError as error:  # its strerror: str(error) names the path a second time
        raise UsageError(f"cannot read the sweep file {path}: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        raise UsageError(f"cannot read the sweep file {path}: {error}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a sweep file is a mapping with scenario: and grid:")
    unknown = set(data) - {"scenario", "grid"}
    if unknown:
        raise UsageError(f"{path}: unknown keys {sorted(unknown)} (a sweep file has scenario: and grid:)")
    if "grid" in data and not isinstance(data["grid"], dict):
        raise UsageError(f"{path}: grid: must map keys to lists of values")
    scenario = data.get("scenario")
    if scenario is not None and not isinstance(scenario, str):
        raise UsageError(f"{path}: scenario: must be a bundled scenario's name or a YAML path, got {scenario!r}")
    if isinstance(scenario, str) and _names_a_file(scenario, Path(path).parent):
        # relative to the sweep file, as a scenario file's own paths are relative to it
        data["scenario"] = str(Path(path).parent / scenario)
    return data


def _names_a_file(ref: str, folder: Path) -> bool:
    """Whether a sweep file's `scenario:` is a path (load_scenario's rule, with an existing file
    looked for beside the sweep file) rather than a bundled name."""
    return "/" in ref or os.sep in ref or ref.endswith((".yaml", ".yml")) or (folder / ref).is_file()
