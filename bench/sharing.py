"""Sharing bench: every bundled scenario under every policy, the figures users compare.

For each scenario (default: every bundled one but the day-long cluster-1024 and the executor's
cpu-demo) `rlix.sim.compare` runs every policy plus each pipeline alone (on its home, and with
every GPU its mappings allow, for slowdowns and the ceiling), and this prints one row per
scenario and policy: steps/h, experiments/h, mean and p95 JCT, mean and p95 queueing, mean and
p95 slowdown, idle share, recomputed over generated tokens, and the ceiling. Deterministic
(the simulator's figures); the wall time is the machine's.

    python bench/sharing.py                         # the table
    python bench/sharing.py --json                  # one JSON line: {"rows": [...], "wall_s": ...}
    python bench/sharing.py --scenarios blog-4on12,lab-day --policies rlix,gap-ratio,static-backfill
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from tqdm import tqdm

from rlix.policy import POLICIES
from rlix.scenarios import bundled_scenarios, load_scenario
from rlix.sim.compare import OVERALL_COLUMNS, compare, overall_figure
from rlix.sim.report import format_table

SKIPPED = ("cluster-1024", "cpu-demo")
#: The figures of compare's table that this bench reports (same labels and formats).
KEYS = ("steps_per_hour", "jobs.experiments_per_hour", "jobs.mean_jct_s", "jobs.p95_jct_s",
        "jobs.mean_queueing_s", "jobs.p95_queueing_s", "jobs.mean_slowdown", "jobs.p95_slowdown",
        "idle_share", "loading_share")
COLUMNS = tuple(column for key in KEYS for column in OVERALL_COLUMNS if column[0] == key)


def bench(scenarios: list[str], policies: list[str], quiet: bool) -> list[dict[str, Any]]:
    rows = []
    bar = tqdm(total=len(scenarios), unit="scenario", disable=quiet, file=sys.stderr)
    for name in scenarios:
        bar.set_description(name)
        comparison = compare(load_scenario(name), policies)
        ceiling = comparison.ceiling_steps_per_hour()
        for policy, summary in comparison.summaries.items():
            overall = summary["overall"]
            row: dict[str, Any] = {"scenario": name, "policy": policy}
            row.update({key: overall_figure(overall, key) for key, _label, _fmt in COLUMNS})
            generated = overall.get("generated_tokens") or 0
            row["recomputed_share"] = (overall.get("recomputed_tokens") or 0) / generated if generated else None
            row["ceiling_steps_per_hour"] = ceiling
            row["of_ceiling"] = overall["steps_per_hour"] / ceiling if ceiling else None
            row["finished"] = summary.get("finished", True)
            rows.append(row)
        bar.update()
    bar.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = [n for n in bundled_scenarios() if n not in SKIPPED]
    parser.add_argument("--scenarios", default=",".join(default), help=f"default: {','.join(default)}")
    parser.add_argument("--policies", default=",".join(sorted(POLICIES)), help="default: every policy")
    parser.add_argument("--json", action="store_true", help="one JSON line")
    args = parser.parse_args()
    scenarios = [s for s in args.scenarios.split(",") if s]
    policies = [p for p in args.policies.split(",") if p]
    unknown = [p for p in policies if p not in POLICIES] + [s for s in scenarios if s not in bundled_scenarios()]
    if unknown:
        parser.error(f"unknown scenario or policy: {', '.join(unknown)}")
    started = time.monotonic()
    rows = bench(scenarios, policies, quiet=args.json)
    wall_s = time.monotonic() - started
    if args.json:
        print(json.dumps({"rows": rows, "wall_s": wall_s}))
        return 0
    import pandas as pd

    frame = pd.DataFrame(rows)
    labels = {key: label for key, label, _fmt in COLUMNS}
    formats = {label: fmt for _key, label, fmt in COLUMNS}
    formats.update({"recomputed/generated": "{:.0%}", "ceiling": "{:.1f}", "of ceiling": "{:.0%}"})
    frame = frame.rename(columns={**labels, "recomputed_share": "recomputed/generated",
                                  "ceiling_steps_per_hour": "ceiling", "of_ceiling": "of ceiling"})
    print(format_table(frame, formats))
    print(f"\n{len(scenarios)} scenarios x {len(policies)} policies in {wall_s:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
