"""Policy ablation: the rlix policy with each of its switchable rules turned off in turn.

Rules (rlix.policy.PolicyConfig): `keep_busy_tail` (on by default: a pipeline with nothing
queued keeps its busy ranks and gives its idle ones), `home_floor` (off by default: a rolling
pipeline's share is at least the GPUs of its home it can use), the no-reversal interval
`min_rebalance_interval_s` (90 s; off is 0), `look_ahead` (on by default: loans of an away
pipeline's own home pay for their moves and are handed back on time), and `tail_spread_batch`
(32 by default: an on-policy tail running more than 32 trajectories per busy rank, on an engine
that migrates them, takes part in the split; off is 0), and `max_drain_s` (4 s by default: a
rank at home cut for a grant finishes what it runs, taking nothing new, for as long as the
gang it delays holds its cluster and at most 4 s; `-drain` cuts it at once), and `keep_warm`
(on by default: a pipeline's rollout ranks stay loaded between its rollouts on GPUs no other
home covers while no one else needs them), and `finish_together` (12 in the studies of jobs
submitted together, off elsewhere: each job's rollout share weighed by its projected time left,
at least `finish_floor`, so the jobs that finish last get what the early ones can spare, and a
job so weighed is not held at its busy ranks in its tail; `-finish_together` is 0), and
`wake_ahead` (on by default: an away pipeline that comes back to roll out has its ranks loaded
on its own home its load time before it is expected, so its rollout starts on them), and
`training_yields` (on by default, with `finish_together`: a job whose training cluster is held
or requested weighs half in the split and gives a bundle on GPUs no home covers to a job with
no rank weighing three times as much), and `prefetch_weights` (on by default: a pipeline reads
its weights into host memory before it asks for an init's GPUs, which it then holds only to copy
them in). For each
scenario: rlix as it is, with each rule switched the other way (-rule: off, +rule: on), with all of them off,
and gap-ratio and static for reference. Figures: steps/h, mean JCT, idle and loading shares,
and recomputed over generated tokens. Deterministic simulator figures; with `--seeds N`, each
is the mean over seeds 0..N-1 (one seed's steps/h moves by about 1% with any small change of
timing, as one job's last step decides the makespan: compare rules over several seeds).

    python bench/policy_ablation.py                  # the table
    python bench/policy_ablation.py --seeds 8        # means over seeds 0-7
    python bench/policy_ablation.py --json           # one JSON line: {"rows": [...]}
    python bench/policy_ablation.py --scenarios agentic-4x32,blog-4on12
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tqdm import tqdm

from rlix.runs.text import format_table
from rlix.scenarios import load_scenario
from rlix.sim import simulate

DEFAULT_SCENARIOS = ("agentic-4x32", "math-rlvr", "mixed-lora", "blog-4on12")
#: Each rule switched from its default: (label, override).
SWITCHED = {"keep_busy_tail": ("-keep_busy_tail", False), "home_floor": ("+home_floor", True),
            "min_rebalance_interval_s": ("-min_rebalance_interval_s", 0.0), "look_ahead": ("-look_ahead", False),
            "tail_spread_batch": ("-tail_spread", 0), "max_drain_s": ("-drain", 0.0),
            "keep_warm": ("-keep_warm", False), "finish_together": ("-finish_together", 0.0),
            "wake_ahead": ("-wake_ahead", False), "training_yields": ("-training_yields", False),
            "prefetch_weights": ("-prefetch", False)}
ALL_OFF = {"keep_busy_tail": False, "home_floor": False, "min_rebalance_interval_s": 0.0, "look_ahead": False,
           "tail_spread_batch": 0, "max_drain_s": 0.0, "keep_warm": False, "finish_together": 0.0,
           "wake_ahead": False, "training_yields": False, "prefetch_weights": False}
FIGURES = ("steps_per_hour", "mean_jct_s", "idle_share", "loading_share", "recomputed_share")


def variants() -> list[tuple[str, str, dict[str, Any]]]:
    """(label, policy, config overrides)."""
    out: list[tuple[str, str, dict[str, Any]]] = [("rlix", "rlix", {})]
    out += [(f"rlix {label}", "rlix", {rule: value}) for rule, (label, value) in SWITCHED.items()]
    out += [("rlix, all off", "rlix", dict(ALL_OFF)), ("gap-ratio", "gap-ratio", {}), ("static", "static", {})]
    return out


def row(name: str, label: str, policy: str, overrides: dict[str, Any], seeds: int = 0) -> dict[str, Any]:
    """One variant on one scenario: its own seed, or the mean over seeds 0..seeds-1."""
    if seeds:
        rows = [_row(name, label, policy, overrides, seed) for seed in range(seeds)]
        out = dict(rows[0])
        for key in FIGURES:
            values = [r[key] for r in rows if r[key] is not None]
            out[key] = sum(values) / len(values) if values else None
        return out
    return _row(name, label, policy, overrides, None)


def _row(name: str, label: str, policy: str, overrides: dict[str, Any], seed: int | None) -> dict[str, Any]:
    base = load_scenario(name)
    scenario = base.with_policy(policy, {**base.policy.config.model_dump(), **overrides})
    if seed is not None:
        scenario = scenario.model_copy(update={"seed": seed})
    summary = simulate(scenario, plots=False).summary
    overall = summary["overall"]
    generated = overall.get("generated_tokens") or 0
    return {
        "scenario": name,
        "variant": label,
        "steps_per_hour": overall["steps_per_hour"],
        "mean_jct_s": overall["jobs"]["mean_jct_s"],
        "idle_share": overall["idle_share"],
        "loading_share": overall["loading_share"],
        "recomputed_share": (overall.get("recomputed_tokens") or 0) / generated if generated else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS))
    parser.add_argument("--json", action="store_true", help="one JSON line")
    parser.add_argument("--seeds", type=int, default=0, metavar="N",
                        help="mean of each figure over seeds 0..N-1 (default: each scenario's own seed)")
    args = parser.parse_args()
    if args.seeds < 0:
        parser.error("--seeds must be >= 0")
    jobs = [(name, *variant) for name in args.scenarios.split(",") if name for variant in variants()]
    rows = [row(*job, seeds=args.seeds) for job in tqdm(jobs, disable=args.json, file=sys.stderr, unit="run")]
    if args.json:
        print(json.dumps({"rows": rows}))
        return 0
    import pandas as pd

    print(format_table(pd.DataFrame(rows), {"steps_per_hour": "{:.1f}", "mean_jct_s": "{:,.0f}",
                                            "idle_share": "{:.1%}", "loading_share": "{:.1%}",
                                            "recomputed_share": "{:.0%}"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
