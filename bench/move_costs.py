"""Move-cost bench: how rlix's lead over the RLix model depends on what a rollout rank's move costs.

Every Expand wakes an inference engine and loads its weights; every Shrink puts one to sleep.
The cost model charges a fixed time for each (`expand_fixed_s` 2 s, `shrink_fixed_s` 1 s, both
ASSUMPTIONS of rlix.sim.costs: no published figure pins them for a 7B engine in an RL loop)
besides copying the weight shard over the host link. This bench scales both fixed times together
and runs the scenario under rlix and under gap-ratio (the RLix model) at each scale, same seed
and same jobs, so a lab can read off its own hardware's point: mean JCT of each, the ratio, and
each policy's loading share. Deterministic simulator figures; lab-day takes about 1 min a run.

    python bench/move_costs.py                          # lab-day, scales 0.5,1,1.5,2, the table
    python bench/move_costs.py --seeds 2 --json         # mean over seeds 0 and 1, one JSON line
    python bench/move_costs.py --scenario blog-4on12 --scales 0.25,1,4 --plot out.png

The plot is drawn only when asked (`--plot PATH`, checked before the runs); the README's is
`--seeds 2 --scales 0.25,0.5,1,1.5,2 --plot docs/move-costs.png`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from statistics import fmean
from typing import Any

from rlix.runs.breakdown_plot import plot_path_arg
from rlix.scenarios import bundled_scenarios, load_scenario
from rlix.scenarios.schema import Scenario
from rlix.sim.parallel import run_all
from rlix.sim.report import format_table
from rlix.traces.options import non_negative_int, positive_int, positive_number, separated_by_commas

POLICIES = ("rlix", "gap-ratio")
FIXED = ("expand_fixed_s", "shrink_fixed_s")
DEFAULT_SCALES = (0.5, 1.0, 1.5, 2.0)


def scaled_costs(scenario: Scenario, scale: float) -> dict[str, float]:
    """The scenario's cost overrides with both fixed move times `scale` times what they are in
    it (its own override, else the cost model's default)."""
    from rlix.sim.costs import CostModel

    defaults = {f.name: f.default for f in dataclasses.fields(CostModel) if f.name in FIXED}
    return {**scenario.costs, **{name: scale * float(scenario.costs.get(name, defaults[name])) for name in FIXED}}


def run_one(name: str, policy: str, scale: float, seed: int | None) -> dict[str, Any]:
    from rlix.sim import simulate

    base = load_scenario(name)
    update: dict[str, Any] = {"costs": scaled_costs(base, scale)}
    if seed is not None:
        update["seed"] = seed
    scenario = base.with_policy(policy, base.policy.config.model_dump()).model_copy(update=update)
    overall = simulate(scenario, plots=False).summary["overall"]
    return {"scale": scale, "policy": policy, "mean_jct_s": overall["jobs"]["mean_jct_s"],
            "loading_share": overall["loading_share"], **{key: update["costs"][key] for key in FIXED}}


def bench(name: str, scales: list[float], seeds: int, workers: int, quiet: bool) -> list[dict[str, Any]]:
    """One row per scale: both policies' mean JCT and loading share (means over the seeds) and
    rlix's mean JCT over the RLix model's."""
    seed_list: list[int | None] = list(range(seeds)) if seeds else [None]
    jobs = [(name, policy, scale, seed) for scale in scales for policy in POLICIES for seed in seed_list]
    runs = run_all(run_one, jobs, workers, quiet)
    rows = []
    for scale in scales:
        at_scale = [r for r in runs if r["scale"] == scale]
        row: dict[str, Any] = {"scenario": name, "scale": scale, **{k: at_scale[0][k] for k in FIXED}}
        for policy, key in (("rlix", "rlix"), ("gap-ratio", "rlix_model")):
            mine = [r for r in at_scale if r["policy"] == policy]
            row[f"{key}_mean_jct_s"] = fmean(r["mean_jct_s"] for r in mine)
            row[f"{key}_loading_share"] = fmean(r["loading_share"] for r in mine)
        row["ratio"] = row["rlix_mean_jct_s"] / row["rlix_model_mean_jct_s"]
        rows.append(row)
    return rows


def plot(rows: list[dict[str, Any]], path: str, target: float) -> None:
    """rlix's mean JCT over the RLix model's against the fixed wake time, the target drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    wake = [row["expand_fixed_s"] for row in rows]
    ax.plot(wake, [row["ratio"] for row in rows], marker="o", label="rlix / the RLix model")
    ax.axhline(target, color="grey", linestyle="--", label=f"target {target:g}x")
    for row in rows:
        ax.annotate(f"{row['ratio']:.2f}x", (row["expand_fixed_s"], row["ratio"]), textcoords="offset points",
                    xytext=(4, 6), fontsize=8)
    first = rows[0]
    at_one = first["expand_fixed_s"] / first["scale"], first["shrink_fixed_s"] / first["scale"]
    ax.set_xlabel(f"fixed wake time of a rank, s (sleep scaled alike; scale 1: {at_one[0]:g} s and {at_one[1]:g} s)")
    ax.set_ylabel("mean JCT ratio")
    ax.margins(x=0.1, y=0.15)
    ax.set_title(f"{first['scenario']}: rlix's mean JCT over the RLix model's, by move cost")
    ax.legend(fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _scales(text: str) -> list[float]:
    return sorted(set(separated_by_commas(text, positive_number, "numbers above 0", "0.5,1,2")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="move_costs.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="lab-day", choices=bundled_scenarios(), metavar="SCENARIO",
                        help="a bundled scenario (default: lab-day)")
    parser.add_argument("--scales", type=_scales, default=list(DEFAULT_SCALES),
                        help="factors on both fixed move times, comma-separated (default: 0.5,1,1.5,2)")
    parser.add_argument("--seeds", type=non_negative_int, default=0, metavar="N",
                        help="mean over seeds 0..N-1 (default: the scenario's own seed)")
    parser.add_argument("--workers", type=positive_int, default=2, help="runs at once (default 2)")
    parser.add_argument("--target", type=positive_number, default=0.8, help="the ratio drawn as the target (default 0.8)")
    parser.add_argument("--plot", type=plot_path_arg, metavar="PATH", help="also draw the plot here (e.g. docs/move-costs.png; default: none)")
    parser.add_argument("--json", action="store_true", help="one JSON line")
    args = parser.parse_args(argv)
    rows = bench(args.scenario, args.scales, args.seeds, args.workers, quiet=args.json)
    if args.plot is not None:
        plot(rows, args.plot, args.target)
    if args.json:
        print(json.dumps({"rows": rows, "plot": args.plot}))
        return 0
    import pandas as pd

    formats = {"scale": "{:g}", "expand_fixed_s": "{:g}", "shrink_fixed_s": "{:g}", "rlix_mean_jct_s": "{:,.0f}",
               "rlix_model_mean_jct_s": "{:,.0f}", "ratio": "{:.2f}", "rlix_loading_share": "{:.1%}",
               "rlix_model_loading_share": "{:.1%}"}
    columns = ["scale", "expand_fixed_s", "shrink_fixed_s", "rlix_mean_jct_s", "rlix_model_mean_jct_s", "ratio",
               "rlix_loading_share", "rlix_model_loading_share"]
    print(format_table(pd.DataFrame(rows)[columns], formats))
    if args.plot is not None:
        print(f"\nplot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
