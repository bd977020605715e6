"""How far apart live runs of one config land: the floor under the fidelity check's errors.

Runs each config live `--repeats` times back to back on the CPU executor (cpu-demo and the
fidelity check's variants: rlix.studies.fidelity.VARIANTS), the machine's speed gauged before and
after each run, then reports (rlix.studies.repeatability):

- the spread of each figure over the runs (makespan, mean step time per pipeline, CPU seconds);
- the floor: every run taken as the prediction of every other, with the fidelity check's
  errors (|pred - meas| / meas; step time: the mean over pipelines), median and max;
- the simulator calibrated on each run and set against the others (`sim_*`): its error on a
  config it has seen;
- how the runs' CPU seconds and makespans follow the speed gauge (Pearson r).

    .venv/bin/python bench/repeatability.py [--configs cpu-demo,static] [--repeats 4] [--out DIR] [--json]

Takes ~1 min per cpu-demo run on 2 cores (~8 min for the defaults). `--reuse` keeps finished
runs in --out and only reports again.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rlix.studies.fidelity import VARIANTS
from rlix.studies.fidelity_report import check_out_option, chosen_configs, json_line_stdout
from rlix.studies.repeatability import pairwise, run_repeats, same_config, summarize

CONFIGS = {"cpu-demo": None, **VARIANTS}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def print_report(reports: list[dict]) -> None:
    print(f"{'config':<16} {'runs':>4} {'makespan s (min-max)':>22} {'cv':>6} {'CPU-s cv':>9} "
          f"{'floor: makespan':>16} {'step':>7} {'max':>7} {'sim: makespan':>14} {'step':>7} {'r(speed, CPU-s)':>16}")
    for r in reports:
        span, cpu = r["makespan_s"], r.get("own_cpu_s", {})
        worst = max(v for v in (r["floor_max_makespan_error"], r["floor_max_step_time_error"]) if v is not None)
        corr = r["speed_vs_own_cpu"]
        print(f"{r['config']:<16} {len(r['runs']):>4} {span['mean']:>8.1f} ({span['min']:.1f}-{span['max']:.1f})"
              f" {span['cv']:>6.1%} {_pct(cpu.get('cv')):>9} {_pct(r['floor_median_makespan_error']):>16}"
              f" {_pct(r['floor_median_step_time_error']):>7} {_pct(worst):>7}"
              f" {_pct(r.get('sim_median_makespan_error')):>14} {_pct(r.get('sim_median_step_time_error')):>7}"
              f" {'-' if corr is None else f'{corr:+.2f}':>16}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default="cpu-demo,static", help=f"of {','.join(CONFIGS)}")
    parser.add_argument("--repeats", type=int, default=4, help="live runs per config (at least 2)")
    parser.add_argument("--out", default="runs/repeatability", help="where the run folders go")
    parser.add_argument("--reuse", action="store_true", help="keep finished live runs already in --out")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args(argv)
    names = chosen_configs(parser, args.configs, CONFIGS)
    if args.repeats < 2:
        parser.error("--repeats: at least 2 runs are needed to compare")
    check_out_option(parser, args.out)
    stdout = json_line_stdout(args.json)
    t0, reports = time.monotonic(), []
    for name in names:
        out = Path(args.out) / name
        runs = run_repeats(CONFIGS[name], out, args.repeats, args.reuse,
                           progress=lambda k, d, name=name: print(f"{name} run {k}: done ({time.monotonic() - t0:.0f} s)",
                                                                   file=sys.stderr))
        reports.append(summarize(name, runs, pairwise(name, runs), same_config(name, CONFIGS[name], runs, out)))
    result = {"configs": reports, "wall_s": time.monotonic() - t0}
    if args.json:
        print(json.dumps(result, sort_keys=True), file=stdout, flush=True)
    else:
        print_report(reports)
        print(f"{result['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
