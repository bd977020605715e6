"""Fluid allocation: the best makespan a schedule of whole-node allocations could reach.

The ceiling of a dedicated study (`rlix-sim compare`) gives its last job every GPU of the pool
from its arrival on, whatever the others need. This bench asks what a schedule that shares the
pool can reach when each job, at any time, runs as it does alone on some number of nodes, and
the pool's GPUs are divided among the jobs as an optimiser sees fit, over time:

- each pipeline is run alone (as `bench/alone_scaling.py` does) on its home's nodes and on every
  larger number of nodes up to the pool; from its steps table come its rollout seconds `R(g)` on
  `g` GPUs, its init and training seconds (old log-probs, critic, reference, actor training,
  checkpoints: on its home's GPUs) and the rest of its time alone (weight publishes and the
  like, on no GPU);
- an on-policy job (staleness 0 on every adapter) rolls out, trains and publishes in turn, so
  its time after arrival is its training and off-GPU time plus its rollouts', which it may
  take at any mix of node counts (a share `x_g / R(g)` of its rollouts done in `x_g` seconds
  on `g` GPUs); it holds `g` GPUs only while it rolls out and its home while it trains;
- an off-policy job overlaps its rollouts with training, so it is charged as a whole: its time
  alone on `g` GPUs, holding `g` GPUs throughout;
- between consecutive arrivals the jobs present share the pool's GPUs on average; a linear
  programme (scipy's HiGHS) finds the shortest makespan.

It is an estimate, not a bound, and errs both ways: it ignores the order of a job's steps and
the whole TP bundles a rank needs (optimistic), and it charges a rollout on `g` GPUs for `g`
GPUs until its last trajectory ends, where a policy may hand the GPUs of a rollout's tail to
others (pessimistic). It says what the time-alone curves of the jobs leave room for: on
agentic-4x32 (seeds 0-7) 96.1% of the ceiling (95.5-96.8%, short of 97% on every seed; rlix
95.1%); on math-rlvr the ceiling itself (100%, seed 0; rlix 97.9%).

    python bench/fluid_allocation.py                        # agentic-4x32, seeds 0-7 (~1 min)
    python bench/fluid_allocation.py --scenario math-rlvr --seeds 2 --json
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling bench, alone_scaling

from rlix.scenarios import Scenario, bundled_scenarios, load_scenario  # noqa: E402
from rlix.sim.choices import means_over_seeds  # noqa: E402
from rlix.sim.parallel import run_all  # noqa: E402
from rlix.traces.options import positive_int  # noqa: E402

#: Steps-table columns of the stages on a job's training GPUs (its home).
HOME_STAGES = ("values_s", "old_log_probs_s", "ref_log_probs_s", "critic_train_s", "actor_train_s", "checkpoint_s")


@dataclass(frozen=True)
class Job:
    """A pipeline as the programme sees it. `alone_s[g]`: its time alone on g GPUs from its
    arrival; `rollout_s[g]`: its rollouts' seconds then (on-policy jobs); `home_s`: its init and
    training seconds on `home_gpus`; `off_gpu_s`: the rest of its time alone, on no GPU (weight
    publishes, the end of its run): the same on every number of GPUs."""

    pipeline_id: str
    arrival_s: float
    on_policy: bool
    home_gpus: int
    alone_s: dict[int, float]
    rollout_s: dict[int, float]
    home_s: float
    off_gpu_s: float


def alone_figures(name: str, seed: int, pipeline_id: str, num_nodes: int) -> dict[str, Any]:
    """`pipeline_id` alone on `num_nodes` nodes (its home's first): its time, its rollout,
    home-stage and publish seconds."""
    from alone_scaling import on_nodes

    from rlix.sim import simulate

    scenario = load_scenario(name).model_copy(update={"seed": seed})
    result = simulate(on_nodes(scenario, pipeline_id, num_nodes), plots=False)
    steps = result.tables["steps"]
    steps = steps[steps["pipeline_id"] == pipeline_id]
    return {"pipeline_id": pipeline_id, "num_nodes": num_nodes, "seed": seed,
            "jct_s": float(result.summary["overall"]["jobs"]["mean_jct_s"]),
            "first_step_s": float(steps["t_start"].min()), "rollout_s": float(steps["rollout_s"].sum()),
            "home_s": float(steps[list(HOME_STAGES)].to_numpy().sum()), "publish_s": float(steps["sync_s"].sum())}


def shared_run(name: str, seed: int) -> dict[str, Any]:
    """The study itself under its own policy: steps per hour and makespan."""
    from rlix.sim import simulate

    summary = simulate(load_scenario(name).model_copy(update={"seed": seed}), plots=False).summary
    return {"seed": seed, "steps_per_hour": float(summary["overall"]["steps_per_hour"]),
            "makespan_s": float(summary["makespan_s"])}


def jobs_of(scenario: Scenario, rows: list[dict[str, Any]]) -> list[Job]:
    """The programme's jobs from one seed's alone runs."""
    per_node = scenario.topology_config.gpus_per_node
    jobs = []
    for pipeline in scenario.pipelines:
        mine = {r["num_nodes"] * per_node: r for r in rows if r["pipeline_id"] == pipeline.id}
        whole = mine[max(mine)]
        staleness = pipeline.max_staleness
        bounds = staleness.values() if isinstance(staleness, dict) else [staleness]
        home_s = whole["first_step_s"] + whole["home_s"]
        rest_s = min(r["jct_s"] - r["first_step_s"] - r["home_s"] - r["rollout_s"] for r in mine.values())
        jobs.append(Job(pipeline.id, float(pipeline.arrival_s), all(b == 0 for b in bounds), pipeline.home_size,
                        alone_s={g: r["jct_s"] for g, r in mine.items()},
                        rollout_s={g: r["rollout_s"] for g, r in mine.items()},
                        home_s=home_s, off_gpu_s=max(rest_s, whole["publish_s"])))
    return jobs


def fluid_makespan_s(jobs: list[Job], num_gpus: int) -> float:
    """The shortest makespan of the fluid programme (see the module's docstring)."""
    import numpy as np
    from scipy.optimize import linprog

    starts = sorted({job.arrival_s for job in jobs})
    num_intervals = len(starts)  # the last runs from the last arrival to the makespan
    index: dict[tuple[Any, ...], int] = {}

    def var(*key: Any) -> int:
        return index.setdefault(key, len(index))

    for job in jobs:
        for k, start in enumerate(starts):
            if start >= job.arrival_s:
                for g in job.alone_s:
                    var(job.pipeline_id, k, "at", g)
                if job.on_policy:
                    var(job.pipeline_id, k, "home")
                    var(job.pipeline_id, k, "off gpu")
    last = var("last interval")
    rows: list[tuple[dict[int, float], float]] = []  # (coefficients, bound) of `<=` rows

    def length(k: int) -> tuple[dict[int, float], float]:
        """An interval's length as (coefficients, constant): the last one's is a variable."""
        return ({last: -1.0}, 0.0) if k == num_intervals - 1 else ({}, starts[k + 1] - starts[k])

    for k in range(num_intervals):
        extra, room = length(k)
        pool = {i: float(key[3]) for key, i in index.items() if key[1:3] == (k, "at")}
        pool |= {index[(job.pipeline_id, k, "home")]: float(job.home_gpus) for job in jobs
                 if (job.pipeline_id, k, "home") in index}
        rows.append(({**pool, **{i: c * num_gpus for i, c in extra.items()}}, room * num_gpus))
        for job in jobs:
            mine = [i for key, i in index.items() if key[0] == job.pipeline_id and key[1] == k]
            if mine:  # one job does one thing at a time (an off-policy one: its whole run)
                rows.append(({**dict.fromkeys(mine, 1.0), **extra}, room))
    for job in jobs:
        work = job.rollout_s if job.on_policy else job.alone_s
        done = {i: -1.0 / work[key[3]] for key, i in index.items() if key[0] == job.pipeline_id and key[2] == "at"}
        rows.append((done, -1.0))
        if job.on_policy:
            for part, seconds in (("home", job.home_s), ("off gpu", job.off_gpu_s)):
                rows.append(({i: -1.0 for key, i in index.items() if key[0] == job.pipeline_id and key[2] == part},
                             -seconds))
    matrix = np.zeros((len(rows), len(index)))
    for r, (coefficients, _bound) in enumerate(rows):
        for i, c in coefficients.items():
            matrix[r, i] = c
    objective = np.zeros(len(index))
    objective[last] = 1.0
    result = linprog(objective, A_ub=matrix, b_ub=np.array([bound for _c, bound in rows]),
                     bounds=[(0, None)] * len(index), method="highs")
    if result.status != 0:
        raise RuntimeError(f"the fluid programme has no solution: {result.message}")
    return float(starts[-1] + result.x[last])


def bench(name: str, seeds: int, workers: int, quiet: bool) -> list[dict[str, Any]]:
    """One row per seed: the ceiling (critical paths), the fluid makespan and the policy's run."""
    scenario = load_scenario(name)
    per_node = scenario.topology_config.gpus_per_node
    num_nodes = scenario.topology_config.num_nodes
    runs = [(name, seed, p.id, n) for seed in range(seeds) for p in scenario.pipelines
            for n in range(max(1, -(-p.home_size // per_node)), num_nodes + 1)]
    alone = run_all(alone_figures, runs, workers, quiet)
    shared = run_all(shared_run, [(name, seed) for seed in range(seeds)], workers, quiet)
    total_steps = sum(p.steps for p in scenario.pipelines)
    out = []
    for seed in range(seeds):
        jobs = jobs_of(scenario, [r for r in alone if r["seed"] == seed])
        critical_path_s = max(job.arrival_s + job.alone_s[max(job.alone_s)] for job in jobs)
        fluid_s = fluid_makespan_s(jobs, scenario.num_gpus)
        ceiling = total_steps * 3600.0 / critical_path_s
        run = shared[seed]
        out.append({"seed": seed, "critical_path_s": critical_path_s, "fluid_makespan_s": fluid_s,
                    "policy_makespan_s": run["makespan_s"], "ceiling_steps_per_h": ceiling,
                    "fluid_steps_per_h": total_steps * 3600.0 / fluid_s, "policy_steps_per_h": run["steps_per_hour"],
                    "fluid_of_ceiling": critical_path_s / fluid_s, "policy_of_ceiling": run["steps_per_hour"] / ceiling})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="agentic-4x32",
                        help="a bundled study of full-finetune jobs with homes (default agentic-4x32)")
    parser.add_argument("--seeds", type=positive_int, default=8, metavar="N", help="seeds 0..N-1 (default 8)")
    parser.add_argument("--workers", type=positive_int, default=2, help="processes (default 2)")
    parser.add_argument("--json", action="store_true", help="one JSON line: {\"rows\": [...], \"mean\": {...}}")
    args = parser.parse_args()
    if args.scenario not in bundled_scenarios():
        parser.error(f"unknown scenario {args.scenario!r} (bundled: {', '.join(bundled_scenarios())})")
    scenario = load_scenario(args.scenario)
    if any(p.kind != "full_finetune" for p in scenario.pipelines) or scenario.templates:
        parser.error(f"{args.scenario}: the programme takes studies of full-finetune jobs submitted as "
                     "pipelines (agentic-4x32, math-rlvr, blog-4on12), not multi-LoRA pipelines or streams")
    rows = bench(args.scenario, args.seeds, args.workers, quiet=args.json)
    mean = {key: fmean(row[key] for row in rows) for key in rows[0] if key != "seed"}
    if args.json:
        print(json.dumps({"rows": rows, "mean": mean}))
        return 0
    import pandas as pd

    from rlix.sim.report import format_table

    frame = pd.DataFrame([*rows, {"seed": "mean", **mean}])
    policy = scenario.policy.name
    print(f"{args.scenario}: fluid allocation against the ceiling and {policy}, {means_over_seeds(args.seeds)}")
    print(format_table(frame, {key: "{:,.0f}" for key in ("critical_path_s", "fluid_makespan_s", "policy_makespan_s")}
                       | {key: "{:.2f}" for key in ("ceiling_steps_per_h", "fluid_steps_per_h", "policy_steps_per_h")}
                       | {"fluid_of_ceiling": "{:.1%}", "policy_of_ceiling": "{:.1%}"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
