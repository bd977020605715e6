"""How many simulated rollouts per wall-second the whole simulator replays (issue 8's target).

Replays the bundled `cluster-1024` scenario (128 nodes x 8 GPUs, 32 pipelines, 512 prompts x
16 samples per step, a simulated day via its max_time_s) through `rlix.sim.simulate`, end to end
(the core, SimPy, the rollout engines, the recorder, the tables and the summary; no run folder),
cut at 1/4, 1/2 and all of the day, so the cost's growth with rollouts shows. A rollout is a
completed trajectory. Prints one JSON line per run and, last, the whole-day figures with
`scaling`, the figures of every cut:

    .venv/bin/python bench/sim_speed.py --json [--fractions 0.25,0.5,1] [--profile]

Wall time includes other processes' turns on a shared machine; `cpu_s` (time.process_time of
this process) is the figure to trust there. Target: >= 250,000 rollouts per second on 2 cores.
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


def run_once(
    name: str, fraction: float, policy: str | None, progress_every: float | None
) -> dict[str, Any]:
    from rlix.sim import simulate

    scenario = scenario_cut(name, fraction, policy, progress_every)
    gc.collect()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    result = simulate(scenario, plots=False)
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    rollouts = result.tables["rollouts"]
    completed = int((rollouts["status"] == "completed").sum())
    return {
        "simulated_s": round(float(result.summary["makespan_s"]), 1),
        "rollouts": completed,
        "attempts": len(rollouts),
        "steps": int(result.summary["overall"]["steps"]),
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "rollouts_per_s": round(completed / wall),
        "rollouts_per_cpu_s": round(completed / cpu),
        # Peak resident memory of the process so far (cuts run in one process: monotone).
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="cluster-1024")
    parser.add_argument("--policy", default=None, help="override the scenario's policy")
    parser.add_argument(
        "--progress-every", type=float, default=None, help="override engine.progress_every"
    )
    parser.add_argument(
        "--fractions", default="0.25,0.5,1", help="cuts of max_time_s, comma-separated"
    )
    parser.add_argument("--json", action="store_true", help="print JSON lines only")
    parser.add_argument("--profile", action="store_true", help="cProfile the last cut (slower)")
    parser.add_argument("--profile-out", default=None, help="write the profile's stats here")
    args = parser.parse_args()
    fractions = [float(f) for f in args.fractions.split(",")]
    scaling = []
    for i, fraction in enumerate(fractions):
        if args.profile and i == len(fractions) - 1:
            profiler = cProfile.Profile()
            figures = profiler.runcall(
                run_once, args.scenario, fraction, args.policy, args.progress_every
            )
            stats = pstats.Stats(profiler)
            if args.profile_out:
                stats.dump_stats(args.profile_out)
            if not args.json:
                stats.sort_stats("tottime").print_stats(25)
        else:
            figures = run_once(args.scenario, fraction, args.policy, args.progress_every)
        scaling.append(figures)
        print(json.dumps({"fraction": fraction, **figures}), flush=True)
    last = scaling[-1]
    print(
        json.dumps(
            {
                "bench": "sim_speed",
                "scenario": args.scenario,
                **{
                    k: last[k]
                    for k in (
                        "rollouts",
                        "simulated_s",
                        "wall_s",
                        "cpu_s",
                        "rollouts_per_s",
                        "rollouts_per_cpu_s",
                    )
                },
                "scaling": scaling,
            }
        )
    )


if __name__ == "__main__":
    main()
