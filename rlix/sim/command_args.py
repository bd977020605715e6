"""The command lines of `rlix-sim run`, `compare` and `demo`: their help texts and options
(what they do is rlix.sim.commands)."""

from __future__ import annotations

import argparse
import os

from rlix.policy import POLICIES
from rlix.runs.tablechoice import TABLE_CHOICES, tables_option
from rlix.traces.bundled import bundled_names
from rlix.traces.options import non_negative_int, path_text, positive_number

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


def out_folder(text: str) -> str:
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


def column(text: str) -> tuple[str, str]:
    name, sep, source = text.partition("=")
    if not sep or not name or not source:
        raise argparse.ArgumentTypeError(
            f"expected NAME=SOURCE (e.g. response_tokens=GeneratedTokens), got {text!r}"
        )
    return name, source


def add_common(parser: argparse.ArgumentParser, default_scenario: str | None = None) -> None:
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
        type=column,
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
        type=column,
        default=[],
        help="map a job log column, e.g. arrival=Submit or id=JobID (repeatable; --column maps the trace)",
    )
    parser.add_argument("--seed", type=non_negative_int, help="override the scenario's seed")
    parser.add_argument(
        "--costs", metavar="FILE",
        help="a calibrated cost file (rlix-sim calibrate) replacing the scenario's `costs` section",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def add_run_options(run: argparse.ArgumentParser) -> None:
    """The options of `rlix-sim run`."""
    add_common(run)
    run.add_argument("--policy", choices=sorted(POLICIES), help="override the scenario's policy")
    run.add_argument(
        "--out",
        metavar="DIR",
        type=out_folder,
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


def add_compare_options(parser: argparse.ArgumentParser, default_scenario: str | None = None) -> None:
    add_common(parser, default_scenario)
    parser.add_argument(
        "--policies",
        default="rlix,gap-ratio,static,static-backfill,sequential",
        help="comma-separated policies (default rlix,gap-ratio,static,static-backfill,sequential)",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        type=out_folder,
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
