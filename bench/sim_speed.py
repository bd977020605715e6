"""How many simulated rollouts per wall-second the whole simulator replays (target: 250k).

Replays the bundled `cluster-1024` scenario (128 nodes x 8 GPUs, 32 pipelines, 512 prompts x
16 samples per step, a simulated day via its max_time_s) through `rlix.sim` end to end (the
core, SimPy, the rollout engines, the recorder, the tables and the summary; no run folder). A
rollout is a completed trajectory. One run, watched as it goes: at 1/4 and 1/2 of its simulated
time (`--checkpoints`) the rollouts completed so far and the time spent so far are taken, so
the cost's growth with rollouts shows without running the day three times (a checkpoint's
figures leave out the tables and summary built at the end, which the last line gives as
`tables_wall_s`). Prints one JSON line per checkpoint and for the whole run as each is reached,
then, last, the whole run's figures with `scaling`, every checkpoint's; with `--json` that last
line is all of stdout (the others go to stderr, as progress):

    .venv/bin/python bench/sim_speed.py --json                   # the day (~8 min on one core, ~18 GB)
    .venv/bin/python bench/sim_speed.py --json --fraction 0.05   # the first 1/20 of it (~11 s)
    .venv/bin/python bench/sim_speed.py --json --tables steps              # the day, streamed, steps only
    .venv/bin/python bench/sim_speed.py --json --tables steps --days 7     # a week of it (~1 h)

With `--tables` the run streams its record into a run folder (`--out`, by default a temporary
one, removed after) that gets only the tables named, as `rlix-sim run --tables` does; without
it the tables are built in memory and no folder is written (the figures before streaming).
`--days D` runs D days (the scenario's max_time_s set to D x 86,400 s), `--fraction` of that.

Wall time includes other processes' turns on a shared machine; `cpu_s` (time.process_time of
this process) is the figure to trust there. `max_rss_mb` is the peak resident memory so far.
Target: >= 250,000 rollouts per second on 2 cores.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

from rlix.policy import POLICIES
from rlix.runs.errors import RunError
from rlix.runs.paths import check_out_dir, check_out_file
from rlix.runs.tablechoice import tables_option
from rlix.scenarios import load_scenario
from rlix.scenarios.errors import ScenarioError
from rlix.scenarios.load import validate_scenario
from rlix.traces.options import positive_number


def scenario_cut(
    name: str, fraction: float, policy: str | None = None, progress_every: float | None = None,
    days: float | None = None,
) -> Any:
    """The scenario with its max_time_s (or `days`) cut to `fraction` of it (policy and the
    engine's progress_every overridden when given). A scenario without max_time_s (a stream
    that runs until its last job ends) runs whole; it cannot be cut. A scenario that does not
    load (an unknown name, a bad file, an unknown --policy) is one line and exit 2."""
    try:
        return _cut(name, fraction, policy, progress_every, days)
    except ScenarioError as error:
        fail(" ".join(str(error).split()))


def fail(message: str) -> NoReturn:
    print(f"sim_speed.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _cut(name: str, fraction: float, policy: str | None, progress_every: float | None, days: float | None) -> Any:
    scenario = load_scenario(name)
    data = scenario.model_dump(mode="json", exclude_none=True)
    length_s = scenario.max_time_s if days is None else days * 86400.0
    if length_s is None:
        if fraction != 1.0:
            fail(f"{name} runs until its last job ends (no max_time_s): --fraction needs --days")
    else:
        data["max_time_s"] = length_s * fraction
    if policy is not None:
        data["policy"] = {**data.get("policy", {}), "name": policy}
    if progress_every is not None:
        data["engine"] = {**data.get("engine", {}), "progress_every": progress_every}
    return validate_scenario(data, scenario.source)


def figures(sim: Any, fraction: float, wall0: float, cpu0: float) -> dict[str, Any]:
    """The figures of a run so far (completed rollouts, time spent, peak memory)."""
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    completed = sim.num_completed
    return {
        "fraction": round(fraction, 4),
        "simulated_s": round(float(sim.env.now), 1),
        "rollouts": completed,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "rollouts_per_s": round(completed / wall),
        "rollouts_per_cpu_s": round(completed / cpu),
        # Peak resident memory of the process so far (monotone).
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def run(
    name: str,
    fraction: float,
    checkpoints: list[float],
    policy: str | None,
    progress_every: float | None,
    report: Any,
    tables: frozenset[str] | None = None,
    days: float | None = None,
    out: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Run the scenario cut to `fraction` of its day (or of `days`); `report` gets each
    checkpoint's figures as it is passed, then the whole run's (with `attempts` and `steps`).
    With `tables`, the record streams into a run folder (`out`, or a temporary one) that gets
    only those tables; an rlix folder already at `out` is replaced only with `overwrite`."""
    from rlix.runs.stream import open_sink
    from rlix.sim.api import collect, new_simulation

    scenario = scenario_cut(name, fraction, policy, progress_every, days)
    max_time_s = scenario.max_time_s
    pending = sorted(checkpoints)
    scratch = tempfile.mkdtemp(prefix="sim_speed.") if tables is not None and out is None else None
    folder = out or (None if scratch is None else str(Path(scratch) / "run"))
    gc.collect()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    replace = overwrite or scratch is not None
    sink = None if tables is None else open_sink(folder or "", tables, overwrite=replace)
    sim = new_simulation(scenario, sink=sink)

    def progress(now: float) -> None:
        # Checkpoints are shares of max_time_s; a run to its last job's end has none.
        while pending and max_time_s is not None and now >= pending[0] * max_time_s:
            report(figures(sim, pending.pop(0) * fraction, wall0, cpu0))

    try:
        sim.run(max_time_s, progress)
        tables_wall0 = time.perf_counter()
        result = collect(sim, plots=False, out=folder, overwrite=replace)
        whole = figures(sim, fraction, wall0, cpu0)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    # The end of the run: the tables and the summary built from the records.
    whole["tables_wall_s"] = round(time.perf_counter() - tables_wall0, 2)
    rollouts = result.tables["rollouts"]
    whole["simulated_s"] = round(float(result.summary["makespan_s"]), 1)
    whole["attempts"] = len(rollouts) if tables is None or "rollouts" in tables else None
    whole["steps"] = int(result.summary["overall"]["steps"])
    whole["tables"] = "all, in memory" if tables is None else ",".join(sorted(tables))
    # A check of the running count against the table (completed rows), or the summary's.
    completed = (int((rollouts["status"] == "completed").sum()) if whole["attempts"] is not None
                 else int(result.summary["overall"]["trajectories"]))
    if completed != whole["rollouts"]:
        raise SystemExit(f"counted {whole['rollouts']} rollouts, the record has {completed}")
    report(whole)
    return whole


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="sim_speed.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--scenario", default="cluster-1024", help="a bundled scenario or scenario file (default cluster-1024)")
    parser.add_argument("--policy", default=None, help="override the scenario's policy")
    parser.add_argument(
        "--progress-every", type=positive_number, default=None, help="override engine.progress_every"
    )
    parser.add_argument(
        "--fraction", type=float, default=1.0, help="run this share of max_time_s (default 1)"
    )
    parser.add_argument(
        "--checkpoints",
        default="0.25,0.5",
        help="shares of the run at which figures are taken, comma-separated (default 0.25,0.5)",
    )
    parser.add_argument(
        "--tables", type=tables_option, default=None,
        help="stream the record into a run folder with only these tables, e.g. steps "
        "(default: every table built in memory, no folder)",
    )
    parser.add_argument("--days", type=positive_number, default=None, help="simulate this many days (default the scenario's)")
    parser.add_argument("--out", default=None, help="with --tables: keep the run folder here")
    parser.add_argument("--overwrite", action="store_true",
                        help="with --out: replace a run folder rlix wrote there")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON line on stdout, the whole run's (the checkpoints' go to stderr)")
    parser.add_argument("--profile", action="store_true", help="cProfile the run (slower)")
    parser.add_argument("--profile-out", default=None, help="write the profile's stats here")
    args = parser.parse_args(argv)
    if args.out is not None and args.tables is None:
        parser.error("--out keeps the run folder of --tables: give --tables")
    if args.policy is not None and args.policy not in POLICIES:
        # else the scenario's file and line of its own policy would be named as the fault
        parser.error(f"argument --policy: unknown {args.policy!r} (known: {', '.join(sorted(POLICIES))})")
    if args.overwrite and args.out is None:
        parser.error("--overwrite replaces the folder of --out: give --out")
    if args.profile_out is not None and not args.profile:
        parser.error("--profile-out writes the profile of --profile: give --profile")
    # checked before the run, which can take an hour: a bad path was a traceback at its start or end
    try:
        if args.out is not None:
            check_out_dir(args.out, overwrite=args.overwrite)
    except RunError as error:
        parser.error(f"argument --out: {error}")
    try:
        if args.profile_out is not None:
            check_out_file(args.profile_out)
    except RunError as error:
        parser.error(f"argument --profile-out: {error}")
    if not 0 < args.fraction <= 1:
        parser.error(f"--fraction must be in (0, 1], got {args.fraction}")
    try:
        checkpoints = [float(c) for c in args.checkpoints.split(",") if c.strip()]
    except ValueError:
        parser.error(f"--checkpoints must be numbers separated by commas, got {args.checkpoints!r}")
    if any(not 0 < c < 1 for c in checkpoints):
        parser.error(f"--checkpoints must each be in (0, 1), got {args.checkpoints!r}")
    scaling: list[dict[str, Any]] = []

    def report(entry: dict[str, Any]) -> None:
        scaling.append(entry)
        print(json.dumps(entry), file=sys.stderr if args.json else sys.stdout, flush=True)

    call = (args.scenario, args.fraction, checkpoints, args.policy, args.progress_every, report,
            args.tables, args.days, args.out, args.overwrite)
    if args.profile:
        profiler = cProfile.Profile()
        last = profiler.runcall(run, *call)
        stats = pstats.Stats(profiler)
        if args.profile_out:
            stats.dump_stats(args.profile_out)
        if not args.json:
            stats.sort_stats("tottime").print_stats(25)
    else:
        last = run(*call)
    keys = ("rollouts", "simulated_s", "wall_s", "cpu_s", "rollouts_per_s", "rollouts_per_cpu_s")
    print(
        json.dumps(
            {
                "bench": "sim_speed",
                "scenario": args.scenario,
                **{k: last[k] for k in keys},
                "max_rss_mb": last["max_rss_mb"],
                "tables": last["tables"],
                "scaling": scaling,
            }
        )
    )


if __name__ == "__main__":
    main()
