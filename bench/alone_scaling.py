"""Alone-scaling bench: how a job's time alone depends on how many of the pool's nodes it has.

The ceiling of a dedicated study (`rlix-sim compare`) is one job's critical path: its arrival
plus its time alone with every GPU of the pool. Whether the other jobs can leave it that many
GPUs, and how much it loses when they cannot, depends on how its time alone grows as its GPUs
shrink. This bench runs the job alone (arriving at 0, under rlix, nobody to share with) on its
home's nodes plus the next nodes in id order (a home given as a size is placed on those), from
the nodes its home needs to the whole pool: the nodes left out are lost at time 0 (a `lose_gpu`
fault), so its mappings and home stay as the scenario gives them. Deterministic simulator
figures, means over seeds; the default takes about 5 s on two cores.

    python bench/alone_scaling.py                                  # agentic-4x32's agent2, seeds 0-7
    python bench/alone_scaling.py --scenario math-rlvr --pipeline dapo-7b --seeds 2 --json
"""

from __future__ import annotations

import argparse
import json
import sys
from statistics import fmean
from typing import Any

from rlix.scenarios import Scenario, bundled_scenarios, load_scenario
from rlix.sim.choices import means_over_seeds
from rlix.sim.parallel import run_all
from rlix.traces.options import positive_int


def nodes_kept(scenario: Scenario, pipeline_id: str, num_nodes: int) -> list[int]:
    """The home's nodes first (in id order), then the others in id order, `num_nodes` in all. A
    home given as a size is placed by the policy on the nodes kept."""
    per_node = scenario.topology_config.gpus_per_node
    home = sorted({gpu // per_node for gpu in scenario.pipeline(pipeline_id).home_gpus})
    rest = [node for node in range(scenario.topology_config.num_nodes) if node not in home]
    return (home + rest)[:num_nodes]


def on_nodes(scenario: Scenario, pipeline_id: str, num_nodes: int) -> Scenario:
    """`pipeline_id` alone (rlix.sim.api.alone_on_pool) with every node but `nodes_kept` lost at 0."""
    from rlix.scenarios.load import validate_scenario
    from rlix.sim.api import alone_on_pool

    alone = alone_on_pool(scenario, pipeline_id)
    per_node = scenario.topology_config.gpus_per_node
    kept = set(nodes_kept(scenario, pipeline_id, num_nodes))
    lost = [node for node in range(scenario.topology_config.num_nodes) if node not in kept]
    data: dict[str, Any] = alone.model_dump(mode="json", exclude_none=True)
    data["faults"] = {"decision_failure_rate": 0.0, "events": [
        {"at_s": 0.0, "lose_gpu": f"{node * per_node}-{(node + 1) * per_node - 1}"} for node in lost]}
    return validate_scenario(data, scenario.source)


def run_one(name: str, pipeline_id: str, num_nodes: int, seed: int) -> dict[str, Any]:
    from rlix.sim import simulate

    scenario = load_scenario(name).model_copy(update={"seed": seed})
    summary = simulate(on_nodes(scenario, pipeline_id, num_nodes), plots=False).summary
    return {"num_nodes": num_nodes, "seed": seed, "jct_s": summary["overall"]["jobs"]["mean_jct_s"],
            "finished": bool(summary.get("finished", True))}


def bench(name: str, pipeline_id: str, seeds: int, workers: int, quiet: bool) -> list[dict[str, Any]]:
    """One row per pool size (the nodes its home needs up to the whole pool): the job's mean
    time alone over seeds 0..seeds-1, and that time over its time with the whole pool."""
    scenario = load_scenario(name)
    num_nodes, per_node = scenario.topology_config.num_nodes, scenario.topology_config.gpus_per_node
    least = max(1, -(-scenario.pipeline(pipeline_id).home_size // per_node))
    sizes = range(least, num_nodes + 1)
    jobs = [(name, pipeline_id, n, seed) for n in sizes for seed in range(seeds)]
    runs = run_all(run_one, jobs, workers, quiet)
    means = {n: fmean(r["jct_s"] for r in runs if r["num_nodes"] == n) for n in sizes}
    whole = means[num_nodes]
    return [{"num_nodes": n, "gpus": n * per_node, "jct_s": means[n],
             "of_whole_pool": means[n] / whole,
             "finished": all(r["finished"] for r in runs if r["num_nodes"] == n)} for n in means]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="agentic-4x32", help="a bundled scenario (default agentic-4x32)")
    parser.add_argument("--pipeline", default="agent2", help="the pipeline id (default agent2)")
    parser.add_argument("--seeds", type=positive_int, default=8, metavar="N", help="seeds 0..N-1 (default 8)")
    parser.add_argument("--workers", type=positive_int, default=2, help="processes (default 2)")
    parser.add_argument("--json", action="store_true", help="one JSON line: {\"rows\": [...]}")
    args = parser.parse_args()
    if args.scenario not in bundled_scenarios():
        parser.error(f"unknown scenario {args.scenario!r} (bundled: {', '.join(bundled_scenarios())})")
    scenario = load_scenario(args.scenario)
    ids = [p.id for p in scenario.pipelines]
    if args.pipeline not in ids:
        parser.error(f"no pipeline {args.pipeline!r} in {args.scenario} (its pipelines: {', '.join(ids)})")
    rows = bench(args.scenario, args.pipeline, args.seeds, args.workers, quiet=args.json)
    if args.json:
        print(json.dumps({"rows": rows}))
        return 0
    import pandas as pd

    from rlix.sim.report import format_table

    frame = pd.DataFrame(rows)
    frame["finished"] = frame["finished"].map({True: "yes", False: "NO"})
    print(f"{args.pipeline} of {args.scenario} alone, {means_over_seeds(args.seeds)}")
    print(format_table(frame, {"jct_s": "{:,.0f}", "of_whole_pool": "{:.3f}"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
