"""How many simulated rollouts per wall-second the whole simulator replays (target: 250k).

Replays the bundled `cluster-1024` scenario (128 nodes x 8 GPUs, 32 pipelines, 512 prompts x
16 samples per step, a simulated day via its max_time_s) through `rlix.sim` end to end (the
core, SimPy, the rollout engines, the recorder, the tables and the summary; no run folder). A
rollout is a completed trajectory. One run, watched as it goes: at 1/4 and 1/2 of its simulated
time (`--checkpoints`) the rollouts completed so far and the time spent so far are taken, so
the cost's growth with rollouts shows without running the day three times (a checkpoint's
figures leave out the tables and summary built at the end, which the last line gives as
`tables_wall_s`). Prints one JSON line per checkpoint and, last, the whole run's figures with
`scaling`, every checkpoint's:

    .venv/bin/python bench/sim_speed.py --json                   # the day (~8 min on one core, ~18 GB)
    .venv/bin/python bench/sim_speed.py --json --fraction 0.05   # the first 1/20 of it (~11 s)

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
import time
from typing import Any

from rlix.scenarios import load_scenario
from rlix.scenarios.load import validate_scenario


def scenario_cut(
    name: str, fraction: float, policy: str | None = None, progress_every: float | None = None
) -> Any:
    """The scenario with its max_time_s cut to `fraction` of it (policy and the engine's
    progress_every overridden when given)."""
    scenario = load_scenario(name)
    data = scenario.model_dump(mode="json", exclude_none=True)
    data["max_time_s"] = scenario.max_time_s * fraction
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
) -> dict[str, Any]:
    """Run the scenario cut to `fraction` of its day; `report` gets each checkpoint's figures
    as it is passed, then the whole run's (with `attempts` and `steps`)."""
    from rlix.sim.api import collect, new_simulation

    scenario = scenario_cut(name, fraction, policy, progress_every)
    max_time_s = scenario.max_time_s
    pending = sorted(checkpoints)
    gc.collect()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    sim = new_simulation(scenario)

    def progress(now: float) -> None:
        while pending and now >= pending[0] * max_time_s:
            report(figures(sim, pending.pop(0) * fraction, wall0, cpu0))

    sim.run(max_time_s, progress)
    tables_wall0 = time.perf_counter()
    result = collect(sim, plots=False)
    whole = figures(sim, fraction, wall0, cpu0)
    # The end of the run: the tables and the summary built from the records.
    whole["tables_wall_s"] = round(time.perf_counter() - tables_wall0, 2)
    rollouts = result.tables["rollouts"]
    whole["simulated_s"] = round(float(result.summary["makespan_s"]), 1)
    whole["attempts"] = len(rollouts)
    whole["steps"] = int(result.summary["overall"]["steps"])
    # A check of the running count against the table (completed rows).
    completed = int((rollouts["status"] == "completed").sum())
    if completed != whole["rollouts"]:
        raise SystemExit(f"counted {whole['rollouts']} rollouts, the table has {completed}")
    report(whole)
    return whole


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--scenario", default="cluster-1024")
    parser.add_argument("--policy", default=None, help="override the scenario's policy")
    parser.add_argument(
        "--progress-every", type=float, default=None, help="override engine.progress_every"
    )
    parser.add_argument(
        "--fraction", type=float, default=1.0, help="run this share of max_time_s (default 1)"
    )
    parser.add_argument(
        "--checkpoints",
        default="0.25,0.5",
        help="shares of the run at which figures are taken, comma-separated (default 0.25,0.5)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON lines only")
    parser.add_argument("--profile", action="store_true", help="cProfile the run (slower)")
    parser.add_argument("--profile-out", default=None, help="write the profile's stats here")
    args = parser.parse_args()
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
        print(json.dumps(entry), flush=True)

    call = (args.scenario, args.fraction, checkpoints, args.policy, args.progress_every, report)
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
                "scaling": scaling,
            }
        )
    )


if __name__ == "__main__":
    main()
