"""Job order bench: rlix's job-order settings on an oversubscribed stream, mean JCT against p95
slowdown (the trade-off a lab chooses on).

Variants of the `rlix` policy (rlix.policy.job_order): every job at once (`max_home_load` 0, the
default), and limits on the home load in arrival and in shortest-first order, and lab-day's
setting without stacking homes by expected runtime (`stack_by_runtime` off); gap-ratio and
static-backfill for reference. Every variant runs the same scenario and seed; each job's
slowdown is its JCT over its time alone on its home (computed once, shared by the variants).
Prints one table (mean and p95 JCT, p95 slowdown, p95 queueing, idle share over the run and
while some job waits to start, steps/h) and, with `--plot PATH` (checked before the runs), draws
mean JCT against p95 slowdown. Deterministic simulator figures; lab-day takes under a minute a
variant, 2.5-4 min in all on two workers.

    python bench/job_order.py                                  # lab-day, the table
    python bench/job_order.py --plot docs/job-order.png        # the table and the README's plot
    python bench/job_order.py --json                           # one JSON line: {"rows": [...], "plot": null}
    python bench/job_order.py --scenario blog-4on12 --plot out.png --workers 2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rlix.runs.breakdown_plot import plot_path_arg
from rlix.scenarios import bundled_scenarios, load_scenario
from rlix.sim.parallel import run_all
from rlix.sim.report import format_table
from rlix.traces.options import positive_int

#: (label, policy, PolicyConfig overrides)
VARIANTS: list[tuple[str, str, dict[str, Any]]] = [
    ("rlix, every job at once", "rlix", {"job_order": "arrival", "max_home_load": 0.0}),
    ("rlix, arrival, limit 2.5", "rlix", {"job_order": "arrival", "max_home_load": 2.5}),
    ("rlix, shortest, limit 2", "rlix", {"job_order": "shortest", "max_home_load": 2.0}),
    ("rlix, shortest, limit 2.5", "rlix", {"job_order": "shortest", "max_home_load": 2.5}),
    ("rlix, shortest, limit 3", "rlix", {"job_order": "shortest", "max_home_load": 3.0}),
    ("rlix, shortest, limit 2.5, homes not stacked by runtime", "rlix",
     {"job_order": "shortest", "max_home_load": 2.5, "stack_by_runtime": False}),
    ("gap-ratio", "gap-ratio", {}),
    ("static-backfill", "static-backfill", {}),
]
FIGURES = ("mean_jct_s", "p95_jct_s", "p95_slowdown", "p95_queueing_s")


def run_variant(name: str, label: str, policy: str, overrides: dict[str, Any], alone_s: dict[str, float]) -> dict[str, Any]:
    from rlix.sim import simulate

    base = load_scenario(name)
    scenario = base.with_policy(policy, {**base.policy.config.model_dump(), **overrides})
    overall = simulate(scenario, plots=False, alone_s=alone_s).summary["overall"]
    row: dict[str, Any] = {"scenario": name, "variant": label}
    row.update({key: overall["jobs"][key] for key in FIGURES})
    waiting = overall.get("while_waiting") or {}
    row.update(idle_share=overall["idle_share"], idle_while_waiting=waiting.get("idle_share"),
               steps_per_hour=overall["steps_per_hour"])
    return row


def bench(name: str, workers: int, quiet: bool) -> list[dict[str, Any]]:
    from rlix.sim.alone import alone_jct_s

    alone_s = alone_jct_s(load_scenario(name))
    jobs = [(name, label, policy, overrides, alone_s) for label, policy, overrides in VARIANTS]
    return run_all(run_variant, jobs, workers, quiet, unit="variant")


def plot(rows: list[dict[str, Any]], path: str) -> None:
    """Mean JCT against p95 slowdown, one marker per variant (legend); variants far from the
    best (over 3x its p95 slowdown, e.g. a queue without sharing) are named in the legend with
    their figures instead of stretching the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5.6))
    best = min(row["p95_slowdown"] for row in rows)
    markers = "o^sDv<>PX*"
    for index, row in enumerate(rows):
        label = f"{row['variant']}: {row['mean_jct_s']:,.0f} s, {row['p95_slowdown']:.2f}"
        if row["p95_slowdown"] > 3 * best:
            ax.plot([], [], " ", label=f"{label} (off the chart)")
            continue
        ax.scatter(row["p95_slowdown"], row["mean_jct_s"], marker=markers[index % len(markers)], s=50, label=label)
    ax.set_xlabel("p95 slowdown (JCT / time alone on its home)")
    ax.set_ylabel("mean JCT (s)")
    ax.set_title(f"{rows[0]['scenario']}: mean JCT against p95 slowdown (lower left is better)")
    # Below the axes: the variants' names are long, and beside them they squeeze the chart.
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="job_order.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="lab-day", choices=bundled_scenarios(), metavar="SCENARIO",
                        help="a bundled scenario (default: lab-day)")
    parser.add_argument("--workers", type=positive_int, default=2, help="variants run at once (default 2)")
    parser.add_argument("--plot", type=plot_path_arg, metavar="PATH", help="also draw the plot here (e.g. docs/job-order.png; default: none)")
    parser.add_argument("--json", action="store_true", help="one JSON line")
    args = parser.parse_args(argv)
    rows = bench(args.scenario, args.workers, quiet=args.json)
    if args.plot is not None:
        plot(rows, args.plot)
    if args.json:
        print(json.dumps({"rows": rows, "plot": args.plot}))
        return 0
    import pandas as pd

    formats = {"mean_jct_s": "{:,.0f}", "p95_jct_s": "{:,.0f}", "p95_slowdown": "{:.2f}",
               "p95_queueing_s": "{:,.0f}", "idle_share": "{:.1%}", "idle_while_waiting": "{:.1%}",
               "steps_per_hour": "{:.1f}"}
    print(format_table(pd.DataFrame(rows), formats))
    if args.plot is not None:
        print(f"\nplot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
