"""Finish-together bench: what weighing the split by projected time left trades.

`finish_together` (rlix.policy.finish) multiplies each rolling pipeline's split weight by (its
projected time left / the longest) ** gamma, so the jobs that finish last get the rollout GPUs
the early ones can spare. That shortens the makespan, which sets a study's steps per hour, and
delays the early jobs, which raises the mean JCT. This bench runs rlix on each study at each
gamma (the scenario's other settings as they are) and prints both figures, means over seeds, with
a plot of steps/h against mean JCT per scenario. Deterministic simulator figures; the default
takes about 2 min on two quiet cores.

    python bench/finish_together.py                                   # the four studies, gammas 0,4,8,12,16, 8 seeds
    python bench/finish_together.py --scenarios blog-4on12 --gammas 0,4 --seeds 2 --json
    python bench/finish_together.py --plot finish_together.png
    python bench/finish_together.py --scenarios agentic-4x32 --gammas 8 --set keep_busy_tail=false
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from statistics import fmean
from typing import Any

from rlix.runs.breakdown_plot import plot_path_arg
from rlix.scenarios import load_scenario
from rlix.scenarios.errors import ScenarioError, format_value
from rlix.sim.choices import bundled_scenario_names
from rlix.sim.parallel import run_all
from rlix.sim.report import format_table
from rlix.traces.options import (
    non_negative_int,
    non_negative_number,
    positive_int,
    separated_by_commas,
)

DEFAULT_SCENARIOS = ("agentic-4x32", "blog-4on12", "math-rlvr", "mixed-lora")
DEFAULT_GAMMAS = (0.0, 4.0, 8.0, 12.0, 16.0)


def run_one(name: str, gamma: float, seed: int | None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    from rlix.sim import simulate

    base = load_scenario(name)
    config = {**base.policy.config.model_dump(), **(overrides or {}), "finish_together": gamma}
    scenario = base.with_policy("rlix", config)
    if seed is not None:
        scenario = scenario.model_copy(update={"seed": seed})
    overall = simulate(scenario, plots=False).summary["overall"]
    return {"scenario": name, "gamma": gamma, "steps_per_hour": overall["steps_per_hour"],
            "mean_jct_s": overall["jobs"]["mean_jct_s"]}


def bench(
    names: list[str], gammas: list[float], seeds: int, workers: int, quiet: bool,
    overrides: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One row per (scenario, gamma): steps/h and mean JCT, means over the seeds; `overrides`
    sets other policy tunables for every run."""
    seed_list: list[int | None] = list(range(seeds)) if seeds else [None]
    jobs = [(name, gamma, seed, overrides) for name in names for gamma in gammas for seed in seed_list]
    runs = run_all(run_one, jobs, workers, quiet)
    rows = []
    for name in names:
        for gamma in gammas:
            mine = [r for r in runs if r["scenario"] == name and r["gamma"] == gamma]
            rows.append({"scenario": name, "gamma": gamma,
                         "steps_per_hour": fmean(r["steps_per_hour"] for r in mine),
                         "mean_jct_s": fmean(r["mean_jct_s"] for r in mine)})
    return rows


def plot(rows: list[dict[str, Any]], path: str) -> None:
    """Steps/h against mean JCT, one panel per scenario, each point labelled with its gamma."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(row["scenario"] for row in rows))
    fig, axes = plt.subplots(1, len(names), figsize=(3.6 * len(names), 3.4), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        mine = [row for row in rows if row["scenario"] == name]
        ax.plot([r["mean_jct_s"] for r in mine], [r["steps_per_hour"] for r in mine], marker="o")
        for r in mine:
            ax.annotate(f"{r['gamma']:g}", (r["mean_jct_s"], r["steps_per_hour"]), textcoords="offset points",
                        xytext=(4, 4), fontsize=8)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("mean JCT, s")
        ax.margins(0.15)
    axes[0][0].set_ylabel("steps per hour")
    fig.suptitle("rlix, finish_together = gamma (labels): makespan against mean JCT", fontsize=10)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def _gammas(text: str) -> list[float]:
    try:
        return sorted(set(separated_by_commas(text, non_negative_number, "numbers >= 0", "0,2,4")))
    except argparse.ArgumentTypeError:  # a bad value too is named with the whole list's form
        raise argparse.ArgumentTypeError(f"expected numbers >= 0 separated by commas (e.g. 0,2,4), got {text!r}") from None


def _setting(text: str) -> tuple[str, Any]:
    """KEY=VALUE, the value read as JSON where it parses (true, 8, 0.5) and as text otherwise."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. keep_busy_tail=false), got {text!r}")
    try:
        return key.strip(), json.loads(value)
    except json.JSONDecodeError:
        return key.strip(), value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="finish_together.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", type=bundled_scenario_names, default=",".join(DEFAULT_SCENARIOS),
                        help="bundled scenarios, separated by commas (default: the four studies)")
    parser.add_argument("--gammas", type=_gammas, default=list(DEFAULT_GAMMAS), help=f"default: {','.join(f'{g:g}' for g in DEFAULT_GAMMAS)}")
    parser.add_argument("--seeds", type=non_negative_int, default=8, metavar="N",
                        help="means over seeds 0..N-1 (default 8; 0: each scenario's own seed)")
    parser.add_argument("--workers", type=positive_int, default=2, help="processes (default 2)")
    parser.add_argument("--json", action="store_true", help="one JSON line: {\"rows\": [...]}")
    parser.add_argument("--plot", type=plot_path_arg, metavar="PNG", help="write the trade-off plot here (checked before the runs)")
    parser.add_argument("--set", type=_setting, action="append", default=[], metavar="KEY=VALUE",
                        help="another policy tunable for every run, e.g. keep_busy_tail=false (repeatable)")
    args = parser.parse_args(argv)
    names = args.scenarios
    overrides = dict(args.set)
    if "finish_together" in overrides:
        parser.error("argument --set: finish_together is what --gammas sets, one run per gamma")
    try:
        load_scenario(names[0]).with_policy("rlix", overrides)
    except ScenarioError as exc:
        # its file:line is the scenario's policy, which --set overrides: the fault is --set's
        field = exc.path.removeprefix("policy.config.")
        shown = f"{field}={format_value(exc.value)}: " if exc.has_value else f"{field}: " if field else ""
        parser.error(f"argument --set: {shown}{exc.problem}")
    rows = bench(names, args.gammas, args.seeds, args.workers, quiet=args.json, overrides=overrides)
    if args.plot:
        plot(rows, args.plot)
    if args.json:
        print(json.dumps({"rows": rows}))
        return 0
    import pandas as pd

    formats = {"gamma": "{:g}", "steps_per_hour": "{:.1f}", "mean_jct_s": "{:,.0f}"}
    print(format_table(pd.DataFrame(rows), formats))
    if args.plot:
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
