"""Sharing bench: every bundled scenario under every policy, the figures users compare.

For each scenario (default: every bundled one but the day-long cluster-1024, the executor's
cpu-demo and the large lab-day-256 and lab-day-1024) `rlix.sim.compare` runs every policy plus
each pipeline alone (on its home, and with every GPU its mappings allow, for slowdowns and the
ceiling), and this prints one row per scenario and policy: steps/h, experiments/h, mean and p95
JCT, mean and p95 queueing, mean and p95 slowdown, idle share (over the run, and while some job
waits to start), recomputed over generated tokens, the ceiling, and the JCT floor (the mean JCT
no policy beats) with each mean JCT over it. Deterministic (the simulator's figures); the wall time is
the machine's: the default about 3.5 min on two cores, the last example below about 30 s.

    python bench/sharing.py                         # the table
    python bench/sharing.py --json                  # one JSON line: {"rows": [...], "wall_s": ...}
    python bench/sharing.py --scenarios blog-4on12,lab-day --policies rlix,gap-ratio,static-backfill
    python bench/sharing.py --seeds 5 --scenarios agentic-4x32,math-rlvr   # means over seeds 0-4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from tqdm import tqdm

from rlix.policy import POLICIES
from rlix.runs.text import format_table
from rlix.scenarios import bundled_scenarios, load_scenario
from rlix.sim.choices import bundled_scenario_names, policy_names
from rlix.sim.compare import OVERALL_COLUMNS, compare, overall_figure
from rlix.traces.options import positive_int

SKIPPED = ("cluster-1024", "cpu-demo", "lab-day-256", "lab-day-1024")
#: The figures of compare's table that this bench reports (same labels and formats).
KEYS = ("steps_per_hour", "jobs.experiments_per_hour", "jobs.mean_jct_s", "jobs.p95_jct_s",
        "jobs.mean_queueing_s", "jobs.p95_queueing_s", "jobs.mean_slowdown", "jobs.p95_slowdown",
        "idle_share", "idle_share_while_waiting", "loading_share")
COLUMNS = tuple(column for key in KEYS for column in OVERALL_COLUMNS if column[0] == key)


def bench(scenarios: list[str], policies: list[str], quiet: bool, seeds: list[int | None]) -> list[dict[str, Any]]:
    """One row per scenario and policy; with several seeds, each figure is the mean over them
    and steps/h also has its min and max (the seed draws each pipeline's rollout lengths)."""
    rows = []
    bar = tqdm(total=len(scenarios) * len(seeds), unit="run", disable=quiet, file=sys.stderr)
    for name in scenarios:
        per_seed: dict[str, list[dict[str, Any]]] = {}
        for seed in seeds:
            bar.set_description(name if seed is None else f"{name} seed {seed}")
            comparison = compare(load_scenario(name), policies, seed=seed)
            for policy, summary in comparison.summaries.items():
                per_seed.setdefault(policy, []).append(
                    _row(name, policy, summary, comparison.ceiling_steps_per_hour(), comparison.mean_jct_floor_s()))
            bar.update()
        rows += [_mean(runs) for runs in per_seed.values()]
    bar.close()
    return rows


def _row(name: str, policy: str, summary: dict[str, Any], ceiling: float | None,
         jct_floor_s: float | None) -> dict[str, Any]:
    overall = summary["overall"]
    row: dict[str, Any] = {"scenario": name, "policy": policy}
    row.update({key: overall_figure(overall, key) for key, _label, _fmt in COLUMNS})
    generated = overall.get("generated_tokens") or 0
    row["recomputed_share"] = (overall.get("recomputed_tokens") or 0) / generated if generated else None
    row["ceiling_steps_per_hour"] = ceiling
    row["of_ceiling"] = overall["steps_per_hour"] / ceiling if ceiling else None
    row["mean_jct_floor_s"] = jct_floor_s
    mean_jct_s = row.get("jobs.mean_jct_s")
    row["jct_over_floor"] = mean_jct_s / jct_floor_s if jct_floor_s and mean_jct_s is not None else None
    row["finished"] = summary.get("finished", True)
    return row


def _mean(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The seeds' rows as one: numbers averaged (None if any seed has none), `finished` if all."""
    if len(runs) == 1:
        return runs[0]
    row = dict(runs[0])
    for key, value in runs[0].items():
        values = [r[key] for r in runs]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            row[key] = None if any(v is None for v in values) else sum(values) / len(values)
    row["finished"] = all(r["finished"] for r in runs)
    steps = [r["steps_per_hour"] for r in runs]
    row.update(num_seeds=len(runs), steps_per_hour_min=min(steps), steps_per_hour_max=max(steps))
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = [n for n in bundled_scenarios() if n not in SKIPPED]
    parser.add_argument("--scenarios", type=bundled_scenario_names, default=",".join(default),
                        help=f"bundled scenarios, separated by commas (default: {','.join(default)})")
    parser.add_argument("--policies", type=policy_names, default=",".join(sorted(POLICIES)),
                        help="policies, separated by commas (default: every policy)")
    parser.add_argument("--json", action="store_true", help="one JSON line")
    parser.add_argument("--seeds", type=positive_int, default=None, metavar="N",
                        help="run seeds 0..N-1 and report each figure's mean (steps/h also min and max); "
                             "default: each scenario's own seed")
    args = parser.parse_args()
    scenarios, policies = args.scenarios, args.policies
    started = time.monotonic()
    seeds: list[int | None] = [None] if args.seeds is None else list(range(args.seeds))
    rows = bench(scenarios, policies, quiet=args.json, seeds=seeds)
    wall_s = time.monotonic() - started
    if args.json:
        print(json.dumps({"rows": rows, "wall_s": wall_s}))
        return 0
    import pandas as pd

    frame = pd.DataFrame(rows)
    labels = {key: label for key, label, _fmt in COLUMNS}
    formats = {label: fmt for _key, label, fmt in COLUMNS}
    formats.update({"recomputed/generated": "{:.0%}", "ceiling": "{:.1f}", "of ceiling": "{:.0%}",
                    "JCT floor s": "{:,.0f}", "JCT / floor": "{:.2f}x",
                    "steps/h min": "{:.1f}", "steps/h max": "{:.1f}", "seeds": "{:d}"})
    frame = frame.rename(columns={**labels, "recomputed_share": "recomputed/generated",
                                  "ceiling_steps_per_hour": "ceiling", "of_ceiling": "of ceiling",
                                  "mean_jct_floor_s": "JCT floor s", "jct_over_floor": "JCT / floor",
                                  "steps_per_hour_min": "steps/h min", "steps_per_hour_max": "steps/h max",
                                  "num_seeds": "seeds"})
    print(format_table(frame, formats))
    print(f"\n{len(scenarios)} scenarios x {len(policies)} policies in {wall_s:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
