"""Policy ablation: the rlix policy with each of its switchable rules switched in turn.

Rules (rlix.policy.PolicyConfig; the defaults in brackets):
- `keep_busy_tail` (on): a pipeline with nothing queued keeps its busy ranks, gives its idle ones.
- `home_floor` (off): a rolling pipeline's share is at least the GPUs of its home it can use.
- `min_rebalance_interval_s` (90 s; off is 0): no rebalance undoes a move younger than this.
- `look_ahead` (on): loans of an away pipeline's own home pay for their moves, handed back on time.
- `tail_spread_batch` (32; off is 0): an on-policy tail running more than 32 trajectories per
  busy rank, on an engine that migrates them, takes part in the split.
- `max_drain_s` (4 s; off is 0): a rank at home cut for a grant finishes what it runs, taking
  nothing new, while the gang it delays holds its cluster, at most this long.
- `keep_warm` (on): rollout ranks stay loaded between a pipeline's rollouts on GPUs no other home
  covers while no one else needs them.
- `finish_together` (12 in the studies of jobs submitted together, off elsewhere): each job's
  rollout share weighed by its projected time left, so the jobs that finish last get what the
  early ones can spare.
- `wake_ahead` (on): an away pipeline coming back to roll out has its ranks loaded on its own
  home its load time before it is expected.
- `training_yields` (on; acts only with `finish_together`): a job whose training cluster is held
  or requested weighs half in the split, and gives a bundle no home covers to a job with none.
- `prefetch_weights` (on): a pipeline reads its weights into host memory before it asks for an
  init's GPUs, which the init then holds only to copy them in.
- `stack_by_runtime` (on) and `alike_stack_depth` (4; off is 0): with homes given as sizes, a
  home joins the stack of jobs most like it in expected runtime, and of its own kind up to that
  depth, before GPUs no home covers (rlix.policy.homes).
- `max_home_load` (off; 2.5 on lab-day): jobs start while their homes cover at most this many
  times the pool, in the scenario's `job_order` (rlix.policy.job_order).

For each scenario: rlix as the scenario sets it, with each rule switched from that setting in
turn ("-rule" turns off a rule the scenario has on, "+rule" turns on one it has off, at the
default above, 2.5 for the home-load limit, 12 for finish_together), with all of them off, and
gap-ratio and static for reference. A rule that acts only with another the scenario has off is
left out. Figures: steps/h, mean JCT, idle and loading shares, recomputed over generated
tokens. Deterministic simulator figures; with `--seeds N`, each is the mean over seeds 0..N-1
(one seed's steps/h moves by about 1% with any small change of timing, as one job's last step
decides the makespan: compare rules over several seeds).

    python bench/policy_ablation.py                  # the four studies, each on its own seed
    python bench/policy_ablation.py --seeds 8        # means over seeds 0-7 (about 5 min on two workers)
    python bench/policy_ablation.py --json           # one JSON line: {"rows": [...]}
    python bench/policy_ablation.py --scenarios lab-day --seeds 2   # the busy day (about 13 min)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rlix.runs.text import format_table
from rlix.scenarios import bundled_scenarios, load_scenario
from rlix.scenarios.sections import PolicyTunables
from rlix.sim.parallel import run_all

DEFAULT_SCENARIOS = ("agentic-4x32", "math-rlvr", "mixed-lora", "blog-4on12")
#: Each switchable rule: (name in the labels, its value off, its value on). A variant switches
#: one rule from the scenario's own setting: "-name" turns it off where the scenario has it on,
#: "+name" turns it on (at the value given here) where the scenario has it off.
RULES: dict[str, tuple[str, Any, Any]] = {
    "keep_busy_tail": ("keep_busy_tail", False, True),
    "home_floor": ("home_floor", False, True),
    "min_rebalance_interval_s": ("min_rebalance_interval_s", 0.0, 90.0),
    "look_ahead": ("look_ahead", False, True),
    "tail_spread_batch": ("tail_spread", 0, 32),
    "max_drain_s": ("drain", 0.0, 4.0),
    "keep_warm": ("keep_warm", False, True),
    "finish_together": ("finish_together", 0.0, 12.0),
    "wake_ahead": ("wake_ahead", False, True),
    "training_yields": ("training_yields", False, True),
    "prefetch_weights": ("prefetch", False, True),
    "stack_by_runtime": ("stack_by_runtime", False, True),
    "alike_stack_depth": ("alike_stack", 0, 4),
    "max_home_load": ("home_load_limit", 0.0, 2.5),
}
#: Rules that act only while another is on: switching them where it is off changes nothing.
ACTS_WITH = {"training_yields": "finish_together"}
ALL_OFF = {rule: off for rule, (_name, off, _on) in RULES.items()}
FIGURES = ("steps_per_hour", "mean_jct_s", "idle_share", "loading_share", "recomputed_share")


def variants(config: PolicyTunables) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, policy, config overrides) for a scenario whose rlix settings are `config`."""
    out: list[tuple[str, str, dict[str, Any]]] = [("rlix", "rlix", {})]
    for rule, (name, off, on) in RULES.items():
        other = ACTS_WITH.get(rule)
        if other is not None and getattr(config, other) == RULES[other][1]:
            continue
        is_on = getattr(config, rule) != off
        out.append((f"rlix {'-' if is_on else '+'}{name}", "rlix", {rule: off if is_on else on}))
    out += [("rlix, all off", "rlix", dict(ALL_OFF)), ("gap-ratio", "gap-ratio", {}), ("static", "static", {})]
    return out


def mean_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The rows of one variant over seeds, as one row of means."""
    out = dict(rows[0])
    out.pop("seed", None)
    for key in FIGURES:
        values = [r[key] for r in rows if r[key] is not None]
        out[key] = sum(values) / len(values) if values else None
    return out


def run_variant(name: str, label: str, policy: str, overrides: dict[str, Any], seed: int | None) -> dict[str, Any]:
    """One variant on one scenario and seed (None: the scenario's own)."""
    from rlix.sim import simulate

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
        "seed": scenario.seed,
        "steps_per_hour": overall["steps_per_hour"],
        "mean_jct_s": overall["jobs"]["mean_jct_s"],
        "idle_share": overall["idle_share"],
        "loading_share": overall["loading_share"],
        "recomputed_share": (overall.get("recomputed_tokens") or 0) / generated if generated else None,
    }


def bench(names: list[str], seeds: int, workers: int, quiet: bool) -> list[dict[str, Any]]:
    """One row per scenario and variant: its own seed, or the means over seeds 0..seeds-1."""
    seed_list: list[int | None] = list(range(seeds)) if seeds else [None]
    keys = [(name, *variant) for name in names for variant in variants(load_scenario(name).policy.config)]
    jobs = [(*key, seed) for key in keys for seed in seed_list]
    results = run_all(run_variant, jobs, workers, quiet)
    per_key = len(seed_list)
    return [mean_rows(results[i * per_key:(i + 1) * per_key]) for i in range(len(keys))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS),
                        help=f"bundled scenarios or scenario files, separated by commas (default: {','.join(DEFAULT_SCENARIOS)})")
    parser.add_argument("--json", action="store_true", help="one JSON line")
    parser.add_argument("--seeds", type=int, default=0, metavar="N",
                        help="mean of each figure over seeds 0..N-1 (default: each scenario's own seed)")
    parser.add_argument("--workers", type=int, default=2, metavar="N", help="runs at once (default 2)")
    args = parser.parse_args()
    if args.seeds < 0:
        parser.error("--seeds must be >= 0")
    if args.workers < 1:
        parser.error("--workers must be >= 1")
    names = [name for name in args.scenarios.split(",") if name]
    known = set(bundled_scenarios())
    unknown = [name for name in names if name not in known and not Path(name).is_file()]
    if unknown or not names:
        parser.error(f"--scenarios: unknown {', '.join(unknown) or '(none given)'} (bundled: {', '.join(sorted(known))})")
    for name in names:
        try:
            load_scenario(name)  # a file given that is no scenario was a traceback in the runs
        except ValueError as error:
            parser.error(f"--scenarios: {error}")
    rows = bench(names, args.seeds, args.workers, quiet=args.json)
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
