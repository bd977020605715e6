"""Packing bench: how close a run comes to its own work packed with no load and no idle GPU.

The ceiling of `rlix-sim compare` bounds a study's makespan by what any policy must do. This
bench asks a narrower question of one policy's run: after the last init ends (before then the
inits take turns, which the ceiling's "inits in turn" bound covers), the pool's GPUs are busy
(rollout and training stages), loading or offloading weights, or idle. Had every one of those
load and idle GPU-seconds been removed and the busy ones packed onto the whole pool, the run
would have ended at

    packed makespan = end of the last init + busy GPU-seconds after it / pool GPUs
                      + the run's time after its last GPU work (a final publish)

That is no bound for other policies: a policy whose rollouts take fewer GPU-seconds packs
tighter. It says how much of a gap to the ceiling is this run's moves and idle time, and how
much is its work itself. Deterministic simulator figures, means over seeds; the default takes
about 15 s on two quiet cores.

Beside the GPUs, the jobs: `rankless_s` sums, over jobs, the seconds after the last init in
which a job had rollout work it may run (its latest progress report, `RolloutProgressed`, left
some) and held no rollout rank; `rankless_in_gangs_s` is the part of them while some training
gang (any cluster but rollout) held GPUs, and `most_rankless_s` the largest one job's
(rlix.runs.rankless): how long the jobs' rollouts stalled for want of a rank, and whether the
training gangs are why.

`one_rank_gpu_s` prices each step's rollout another way: its trajectories decoded together on
one rank from the start, up to the engine's batch limit a rank (the longest together), in the
engine's decode cost, prefills left out. A step's longest trajectory sets how long a rank runs,
so this is near the least a step costs when it shares no rank with another step's
trajectories; a staleness-1 job may still beat it by overlapping one step's tail with the next
step's start on the same rank. `one_rank_packed_makespan_s` is the packed makespan with the
rollout GPU-seconds after the last init scaled by one_rank_gpu_s / the run's rollout
GPU-seconds: an estimate of what the run's work would pack to at that price, not a bound.

`rank_count_makespan_s` counts ranks instead of GPU-seconds, where every training gang takes
more than half the pool (one after another) and every pipeline rolls out at one TP: a job that
keeps pace rolls out one step at a time, and one rank a step is about as fast as a step goes,
so a job has one useful rank at a time, and while a gang runs only the ranks its GPUs leave
exist. After the last init, each step not yet done at its one-rank price plus one weight load
(`D` rank-seconds) must then fit one rank a job (while the pool has them) outside the gangs'
`G` seconds and the ranks the gangs leave during them:

    time after the last init >= (D + (ranks - ranks in gangs) * G) / ranks

On blog-4on12, (D + 2 G) / 4. An estimate, not a bound: a job may hold a second rank while no
gang runs, to spread a tail or start its next step early, which the count does not credit.

`--free-moves` runs the same scenarios with every move costing nothing: a rank's weight load
and offload, the engine's wake and sleep, and the prefill of a re-queued trajectory's prefix.
What a policy still leaves below the ceiling then is not the price of its moves but where and
when the work can run (the ceiling is recomputed at those costs, and falls a little).

    python bench/packing.py                                   # blog-4on12, rlix, seeds 0-7
    python bench/packing.py --scenarios blog-4on12,tiny --policies rlix,gap-ratio --seeds 2 --json
    python bench/packing.py --policies rlix,gap-ratio --free-moves     # every move free
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from statistics import fmean
from typing import Any

from rlix.policy.specs import ROLLOUT_CLUSTER
from rlix.runs.rankless import run_rankless
from rlix.sim.choices import add_study_arguments, means_over_seeds
from rlix.sim.cost_fields import FREE_MOVES
from rlix.sim.parallel import run_all

DEFAULT_SCENARIOS = ("blog-4on12",)


def packing(activity: Any, makespan_s: float, num_gpus: int) -> dict[str, float]:
    """The GPU-seconds after the last init by use, and the packed makespan (module docstring).
    `activity` is a run's activity table (one row per GPU and interval: kind busy or loading,
    stage, t_start, t_end); time no row covers is idle."""
    inits = activity[activity["stage"] == "init"]
    start_s = float(inits["t_end"].max()) if len(inits) else float(activity["t_start"].min())
    last_work_s = float(activity["t_end"].max())
    after = activity[activity["t_end"] > start_s]
    seconds = after["t_end"] - after["t_start"].clip(lower=start_s)
    busy = float(seconds[after["kind"] == "busy"].sum())
    loading = float(seconds[after["kind"] == "loading"].sum())
    idle = num_gpus * (last_work_s - start_s) - busy - loading
    after_work_s = makespan_s - last_work_s
    return {"inits_end_s": start_s, "busy_gpu_s": busy, "loading_gpu_s": loading, "idle_gpu_s": idle,
            "makespan_s": makespan_s, "after_work_s": after_work_s,
            "packed_makespan_s": start_s + busy / num_gpus + after_work_s}


def one_rank_gpu_s(costs: Any, tp: int, max_batch: int, steps: list[tuple[Any, Any]]) -> float:
    """GPU-seconds of each step's trajectories ((prompt tokens, response tokens) arrays per
    step) decoded together on one rank, `max_batch` a rank, the longest together (module
    docstring)."""
    import numpy as np

    alpha = np.array([0.0] + [costs.decode_coefficients(b, tp)[0] for b in range(1, max_batch + 1)])
    beta = costs.decode_coefficients(1, tp)[1]
    total_s = 0.0
    for prompts, responses in steps:
        order = np.argsort(responses)[::-1]
        for start in range(0, len(order), max_batch):
            group = order[start:start + max_batch]
            lengths = responses[group]
            # running[i]: sequences still decoding at iteration i + 1
            running = np.bincount(lengths, minlength=int(lengths.max()) + 1)[1:][::-1].cumsum()[::-1]
            kv_read = float(prompts[group] @ lengths + (lengths * (lengths - 1) // 2).sum())
            total_s += float(alpha[running].sum()) + beta * kv_read
    return tp * total_s


def _one_rank_steps(scenario: Any, folder: Path) -> list[tuple[float, float, float]]:
    """Each step of a run's completed trajectories: when its last one completed, its
    `one_rank_gpu_s` and the seconds of one weight load on a rank of its pipeline."""
    import pandas as pd

    from rlix.sim.costs import CostModel

    rollouts = pd.read_parquet(folder / "rollouts.parquet")
    done = rollouts[rollouts["status"] == "completed"]
    steps = []
    specs = scenario.pipeline_specs(scenario.policy.name)
    for pipeline in scenario.pipelines:
        costs = CostModel.for_model(pipeline.model, scenario.topology_config.gpu, scenario.costs)
        tp = specs[pipeline.id].rollout.tp
        mine = done[done["pipeline_id"] == pipeline.id]
        for _, g in mine.groupby(["adapter", "step_consumed"], observed=True):
            gpu_s = one_rank_gpu_s(costs, tp, scenario.engine.max_batch,
                                   [(g["prompt_tokens"].to_numpy(), g["response_tokens"].to_numpy())])
            steps.append((float(g["t_end"].max()), gpu_s, costs.weight_load_seconds(tp)))
    return steps


def rank_count_s(num_gpus: int, num_jobs: int, tp: int, gang_gpus: int, gang_s: float, rank_s: float) -> float:
    """The time the rollouts' `rank_s` rank-seconds need when a job uses one rank at a time and
    `gang_s` seconds of gangs of `gang_gpus` GPUs leave the rest of the pool (module docstring):
    `(rank_s + (ranks - ranks in gangs) * gang_s) / ranks`, ranks = one a job while the pool has
    them, and during a gang what the GPUs it leaves hold."""
    ranks = min(num_jobs, num_gpus // tp)
    ranks_in_gangs = min(num_jobs, (num_gpus - gang_gpus) // tp)
    return (rank_s + (ranks - ranks_in_gangs) * gang_s) / ranks


def wide_gangs(scenario: Any) -> tuple[int, int] | None:
    """(rollout TP, gang GPUs) when every pipeline rolls out at one TP and every training gang
    is of one width over half the pool (so the gangs run one after another); None else."""
    specs = scenario.pipeline_specs(scenario.policy.name).values()
    tps = {spec.rollout.tp for spec in specs}
    # A cluster on a home the policy places has no GPUs listed before the run: its home's size.
    widths = {len(cluster.mapping) or spec.home_size for spec in specs for name, cluster in spec.clusters.items()
              if name != ROLLOUT_CLUSTER}
    if len(tps) != 1 or len(widths) != 1 or 2 * min(widths) <= scenario.num_gpus:
        return None
    (tp,), (gang_gpus,) = tps, widths
    return tp, gang_gpus


def _rank_count_makespan_s(scenario: Any, activity: Any, steps: list[tuple[float, float, float]],
                           row: dict[str, float]) -> float | None:
    """The rank count's makespan (module docstring), or None where it does not apply: the
    pipelines' rollouts of different TP, or training gangs that are not all of one width over
    half the pool (then they need not run one after another)."""
    shape = wide_gangs(scenario)
    if shape is None:
        return None
    tp, gang_gpus = shape
    start_s = row["inits_end_s"]
    gangs = activity[(activity["kind"] == "busy") & ~activity["stage"].isin(["init", "rollout"])]
    gang_s = float((gangs["t_end"] - gangs["t_start"].clip(lower=start_s)).clip(lower=0).sum()) / gang_gpus
    rank_s = sum(gpu_s / tp + load_s for t_done, gpu_s, load_s in steps if t_done > start_s)
    num_jobs = len(scenario.pipelines)
    return start_s + rank_count_s(scenario.num_gpus, num_jobs, tp, gang_gpus, gang_s, rank_s) + row["after_work_s"]


def run_one(name: str, policy: str, seed: int, free_moves: bool = False) -> dict[str, Any]:
    import pandas as pd

    from rlix.scenarios import load_scenario
    from rlix.sim.compare import compare

    scenario = load_scenario(name)
    update: dict[str, Any] = {"seed": seed}
    if free_moves:
        update["costs"] = {**scenario.costs, **FREE_MOVES}
    scenario = scenario.model_copy(update=update)
    with tempfile.TemporaryDirectory() as out:
        comparison = compare(scenario, [policy], out=Path(out))
        folder = comparison.run_dirs[policy]
        assert folder is not None
        activity = pd.read_parquet(folder / "activity.parquet")
        makespan_s = float(comparison.summaries[policy]["makespan_s"])
        row: dict[str, Any] = dict(packing(activity, makespan_s, scenario.num_gpus))
        row.update(run_rankless(folder, makespan_s, row["inits_end_s"]))
        rollout = activity[(activity["kind"] == "busy") & (activity["stage"] == "rollout")]
        rollout_gpu_s = float((rollout["t_end"] - rollout["t_start"]).sum())
        after = rollout[rollout["t_end"] > row["inits_end_s"]]
        after_gpu_s = float((after["t_end"] - after["t_start"].clip(lower=row["inits_end_s"])).sum())
        row["rollout_gpu_s"] = rollout_gpu_s
        steps = _one_rank_steps(scenario, folder)
        row["one_rank_gpu_s"] = sum(gpu_s for _t, gpu_s, _load in steps)
        row["rank_count_makespan_s"] = _rank_count_makespan_s(scenario, activity, steps, row)
        cheaper_s = after_gpu_s * (1 - row["one_rank_gpu_s"] / rollout_gpu_s) if rollout_gpu_s else 0.0
        row["one_rank_packed_makespan_s"] = row["packed_makespan_s"] - cheaper_s / scenario.num_gpus
    bound_s = comparison.makespan_bound_s()
    row.update({"scenario": name, "policy": policy, "seed": seed, "ceiling_makespan_s": bound_s,
                "steps_per_hour": float(comparison.summaries[policy]["overall"]["steps_per_hour"])})
    return row


def bench(names: list[str], policies: list[str], seeds: int, workers: int, quiet: bool,
          free_moves: bool = False) -> list[dict[str, Any]]:
    """One row per (scenario, policy): the packing figures, means over seeds 0..seeds-1, and the
    share of the ceiling the run and its packed work reach (ceiling makespan / makespan)."""
    jobs = [(name, policy, seed, free_moves) for name in names for policy in policies for seed in range(seeds)]
    runs = run_all(run_one, jobs, workers, quiet)
    rows = []
    for name in names:
        for policy in policies:
            mine = [r for r in runs if r["scenario"] == name and r["policy"] == policy]
            row: dict[str, Any] = {"scenario": name, "policy": policy}
            for key in ("steps_per_hour", "inits_end_s", "busy_gpu_s", "loading_gpu_s", "idle_gpu_s", "makespan_s", "packed_makespan_s",
                        "rankless_s", "rankless_in_gangs_s", "most_rankless_s", "rollout_gpu_s", "one_rank_gpu_s",
                        "one_rank_packed_makespan_s"):
                row[key] = fmean(r[key] for r in mine)
            if all(r["ceiling_makespan_s"] for r in mine):
                row["of_ceiling"] = fmean(r["ceiling_makespan_s"] / r["makespan_s"] for r in mine)
                row["packed_of_ceiling"] = fmean(r["ceiling_makespan_s"] / r["packed_makespan_s"] for r in mine)
                row["one_rank_packed_of_ceiling"] = fmean(r["ceiling_makespan_s"] / r["one_rank_packed_makespan_s"]
                                                          for r in mine)
                if all(r["rank_count_makespan_s"] for r in mine):
                    row["rank_count_makespan_s"] = fmean(r["rank_count_makespan_s"] for r in mine)
                    row["rank_count_of_ceiling"] = fmean(r["ceiling_makespan_s"] / r["rank_count_makespan_s"]
                                                         for r in mine)
            rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_study_arguments(parser, DEFAULT_SCENARIOS)
    parser.add_argument("--free-moves", action="store_true",
                        help="every move free: weight loads and offloads, engine wake and sleep, the"
                        " prefill of re-queued prefixes (module docstring)")
    parser.add_argument("--json", action="store_true", help="one JSON line: {\"rows\": [...]}")
    args = parser.parse_args()
    names = args.scenarios
    policies = args.policies
    rows = bench(names, policies, args.seeds, args.workers, quiet=args.json, free_moves=args.free_moves)
    if args.json:
        print(json.dumps({"rows": rows}))
        return 0
    import pandas as pd

    from rlix.runs.text import format_table

    gpu_s, share = "{:,.0f}", "{:.1%}"
    formats = {"steps_per_hour": "{:.1f}", "inits_end_s": gpu_s, "busy_gpu_s": gpu_s, "loading_gpu_s": gpu_s, "idle_gpu_s": gpu_s,
               "makespan_s": gpu_s, "packed_makespan_s": gpu_s, "rankless_s": gpu_s,
               "rankless_in_gangs_s": gpu_s, "most_rankless_s": gpu_s, "rollout_gpu_s": gpu_s, "one_rank_gpu_s": gpu_s,
               "one_rank_packed_makespan_s": gpu_s, "rank_count_makespan_s": gpu_s, "of_ceiling": share, "packed_of_ceiling": share,
               "one_rank_packed_of_ceiling": share, "rank_count_of_ceiling": share}
    costs = "; every move free" if args.free_moves else ""
    print(f"{means_over_seeds(args.seeds)}; GPU-seconds (rankless: job-seconds) after the last init ends{costs}")
    print(format_table(pd.DataFrame(rows), formats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
