"""Rollout headroom: what a study's policy reaches with more GPUs that only rollout may use.

The ceiling of `rlix-sim compare` bounds a study's makespan; `bench/packing.py` splits one run's
gap to it into moves, idle time and the work itself. This bench asks what the gap is made of in
GPUs: each seed's study runs once as it is, then again with each pipeline's home pinned where
that run placed it and `N` more nodes added to the pool. No home covers the added GPUs, so no
training gang or init ever takes them: they widen rollout only, while the gangs take turns on
the same homes as before. Every row is measured against the ceiling of the study as it is
(`of ceiling`: the run's steps per hour over that ceiling's, means over seeds), so a row says
how far the policy gets once rollout has that much more room, and the first row that reaches a
target share says how many GPUs that share asks for.

On blog-4on12 (four 7B jobs whose training gangs take 8 of 12 GPUs): while a gang runs, two
TP-2 rollout ranks are left for four jobs, each of which has a rollout open most of the time
(staleness 1). One more node, two more ranks, is about what it takes for one rank a job.
`rankless_s` (rlix.runs.rankless) sums the seconds after the last init in which a job had
rollout work and no rank, `rankless_in_gangs_s` those while a training gang held GPUs: how much
of that wait the added ranks take away.

    python bench/rollout_headroom.py                          # blog-4on12, rlix, +0..3 nodes, 8 seeds (~20 s)
    python bench/rollout_headroom.py --policies rlix,gap-ratio --nodes 0,1,3 --seeds 2 --json

Steps per hour and the share of the ceiling are for studies of jobs submitted together. On a
stream of arrivals (`lab-day`) read the mean JCT, and skip the ceiling (`--no-ceiling`): it asks
for every one of the stream's jobs alone, and a makespan says little there.

    python bench/rollout_headroom.py --scenarios lab-day --no-ceiling --policies rlix,gap-ratio --nodes 0,1,2 --seeds 2
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from statistics import fmean
from typing import Any

from rlix.runs.rankless import run_rankless
from rlix.sim.choices import add_study_arguments, means_over_seeds
from rlix.sim.parallel import run_all

DEFAULT_SCENARIOS = ("blog-4on12",)
DEFAULT_NODES = (0, 1, 2, 3)


def placed_homes(events_path: Path) -> dict[str, list[int]]:
    """Each pipeline's home GPUs as the run's policy placed them (its `Place` decisions)."""
    homes: dict[str, list[int]] = {}
    with events_path.open() as lines:
        for line in lines:
            if '"Place"' not in line:
                continue
            for decision in json.loads(line).get("decisions", ()):
                if decision.get("type") == "Place":
                    homes[decision["pipeline_id"]] = list(decision["home"])
    return homes


def whole_pool_rollout(scenario: Any) -> list[str]:
    """The pipelines whose rollout may use the whole pool (`gpus: pool`, or a GPU list of every
    GPU): the ones that may use added GPUs."""
    ids = []
    for pipeline in scenario.pipelines:
        rollout = pipeline.clusters.actor_infer
        if rollout.scope == "pool" or (not rollout.scope and len(set(rollout.gpus)) == scenario.num_gpus):
            ids.append(pipeline.id)
    return ids


def widened(scenario: Any, homes: dict[str, list[int]], extra_nodes: int) -> Any:
    """`scenario` with every pipeline's home pinned (`homes` for the ones given as sizes) and
    `extra_nodes` more nodes of the same shape, which no home covers and which the rollout of
    `whole_pool_rollout` may use; ValueError if there is none such, or if a sized home is
    missing from `homes`."""
    from rlix.policy.specs import ROLLOUT_CLUSTER
    from rlix.scenarios.schema import Scenario

    wide = set(whole_pool_rollout(scenario))
    if extra_nodes and not wide:
        raise ValueError(f"{scenario.name}: no pipeline's rollout may use the whole pool, so no "
                         "added GPU would be used")
    unplaced = [p.id for p in scenario.pipelines if not p.home_gpus and p.id not in homes]
    if unplaced:  # left sized, it could be placed on the added GPUs
        raise ValueError(f"{scenario.name}: no home to pin for {', '.join(unplaced)} (never placed in the "
                         "run as it is)")
    data = scenario.model_dump(by_alias=True, exclude_none=True)
    num_gpus = scenario.num_gpus
    data["topology"]["num_nodes"] += extra_nodes
    added = tuple(range(num_gpus, num_gpus + extra_nodes * data["topology"]["gpus_per_node"]))
    for pipeline in data["pipelines"]:
        if isinstance(pipeline["home"], int):
            pipeline["home"] = homes[pipeline["id"]]
        rollout = pipeline["clusters"][ROLLOUT_CLUSTER]
        if pipeline["id"] in wide and rollout["gpus"] != "pool":
            rollout["gpus"] = (*rollout["gpus"], *added)
    data["name"] = f"{scenario.name}-plus{extra_nodes}"
    return Scenario.model_validate(data)


def run_one(name: str, policy: str, seed: int, nodes: tuple[int, ...], ceiling: bool = True) -> list[dict[str, Any]]:
    """The study as it is (with its ceiling, unless not `ceiling`) and widened by each of
    `nodes`, one row each."""
    from rlix.scenarios import load_scenario
    from rlix.sim.api import simulate
    from rlix.sim.compare import compare

    scenario = load_scenario(name).model_copy(update={"seed": seed})
    ceiling_s = None
    with tempfile.TemporaryDirectory() as out:
        if ceiling:
            comparison = compare(scenario, [policy], out=Path(out))
            folder, base = comparison.run_dirs[policy], comparison.summaries[policy]
            ceiling_s = comparison.makespan_bound_s()
        else:
            result = simulate(scenario, policy, out=Path(out) / policy, plots=False)
            folder, base = result.run_dir, result.summary
        assert folder is not None
        homes = placed_homes(folder / "events.jsonl")
        rows = []
        for extra in nodes:
            run_dir, summary = folder, base
            if extra:
                run_dir = Path(out) / f"plus{extra}"
                summary = simulate(widened(scenario, homes, extra), policy, out=run_dir, plots=False).summary
            makespan_s = float(summary["makespan_s"])
            rows.append({"scenario": name, "policy": policy, "seed": seed, "extra_nodes": extra,
                         "num_gpus": scenario.num_gpus + extra * scenario.topology_config.gpus_per_node,
                         "makespan_s": makespan_s,
                         "steps_per_hour": float(summary["overall"]["steps_per_hour"]),
                         "mean_jct_s": float(summary["overall"]["jobs"]["mean_jct_s"]),
                         "ceiling_makespan_s": ceiling_s, **run_rankless(run_dir, makespan_s)})
    return rows


def bench(names: list[str], policies: list[str], nodes: tuple[int, ...], seeds: int, workers: int,
          quiet: bool, ceiling: bool = True) -> list[dict[str, Any]]:
    """One row per (scenario, policy, extra nodes): means over seeds 0..seeds-1, `of_ceiling`
    the study's own ceiling makespan over the run's."""
    jobs = [(name, policy, seed, nodes, ceiling) for name in names for policy in policies for seed in range(seeds)]
    runs = [row for rows in run_all(run_one, jobs, workers, quiet) for row in rows]
    out = []
    for name in names:
        for policy in policies:
            for extra in nodes:
                mine = [r for r in runs if (r["scenario"], r["policy"], r["extra_nodes"]) == (name, policy, extra)]
                row: dict[str, Any] = {"scenario": name, "policy": policy, "extra_nodes": extra,
                                       "num_gpus": mine[0]["num_gpus"]}
                for key in ("steps_per_hour", "makespan_s", "mean_jct_s", "rankless_s", "rankless_in_gangs_s"):
                    row[key] = fmean(r[key] for r in mine)
                if all(r["ceiling_makespan_s"] for r in mine):
                    row["of_ceiling"] = fmean(r["ceiling_makespan_s"] / r["makespan_s"] for r in mine)
                out.append(row)
    return out


def node_counts(text: str) -> tuple[int, ...]:
    """`--nodes`: extra node counts separated by commas, each >= 0."""
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers separated by commas, got {text!r}") from None
    if not counts or min(counts) < 0:
        raise argparse.ArgumentTypeError(f"expected one or more counts >= 0, got {text!r}")
    return tuple(sorted(set(counts)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_study_arguments(parser, DEFAULT_SCENARIOS)
    parser.add_argument("--nodes", type=node_counts, default=DEFAULT_NODES, metavar="N,N,...",
                        help="extra nodes for rollout only, one row each (default: 0,1,2,3)")
    parser.add_argument("--no-ceiling", action="store_true",
                        help="skip the ceiling (every pipeline run alone): for a stream of arrivals, read"
                        " mean_jct_s (module docstring)")
    parser.add_argument("--json", action="store_true", help="one JSON line: {\"rows\": [...]}")
    args = parser.parse_args()
    names = args.scenarios
    if any(args.nodes):
        from rlix.scenarios import load_scenario

        narrow = [name for name in names if not whole_pool_rollout(load_scenario(name))]
        if narrow:
            parser.error(f"{', '.join(narrow)}: no pipeline's rollout may use the whole pool, so no"
                         " added GPU would be used (--nodes 0 runs them as they are)")
    policies = args.policies
    rows = bench(names, policies, args.nodes, args.seeds, args.workers, quiet=args.json, ceiling=not args.no_ceiling)
    if args.json:
        print(json.dumps({"rows": rows}))
        return 0
    import pandas as pd

    from rlix.sim.report import format_table

    formats = {"steps_per_hour": "{:.1f}", "makespan_s": "{:,.0f}", "mean_jct_s": "{:,.0f}", "rankless_s": "{:,.0f}",
               "rankless_in_gangs_s": "{:,.0f}", "of_ceiling": "{:.1%}"}
    against = "" if args.no_ceiling else "; of ceiling: against the study's own ceiling, as it is"
    print(f"{means_over_seeds(args.seeds)}{against}")
    print(format_table(pd.DataFrame(rows), formats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
