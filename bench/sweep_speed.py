"""Points per minute of `rlix-sim sweep` with 1 and 2 local Ray workers.

    python bench/sweep_speed.py [--scenario tiny] [--points 16] [--workers 1,2] [--json]

Each measurement is a fresh sweep (a new folder: nothing skipped) of `--points` points of one
scenario (a `seed` axis), timed from the call to the last row written, Ray's start included,
as a user waits for it. A line per measurement as it ends (on stderr with `--json`); with
`--json`, stdout gets one JSON line: `{"bench": "sweep_speed", "scenario", "points", "runs":
[{"workers", "wall_s", "points_per_min"}]}`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rlix.traces.options import positive_int, separated_by_commas


def measure(scenario: Any, num_points: int, workers: int) -> dict[str, float]:
    """One fresh sweep of `num_points` seeds of `scenario` (a loaded Scenario) on `workers`."""
    from rlix.studies.grid import parse_grid
    from rlix.studies.sweep import run_sweep

    grid = parse_grid([f"seed={','.join(str(s) for s in range(num_points))}"])
    with tempfile.TemporaryDirectory() as folder:
        started = time.monotonic()
        result = run_sweep(scenario, grid, Path(folder) / "sweep", workers=workers)
        wall_s = time.monotonic() - started
    if result.num_failed:
        raise SystemExit(f"{result.num_failed} point(s) failed: {result.rows.error.tolist()}")
    return {"workers": workers, "wall_s": round(wall_s, 2), "points_per_min": round(60 * num_points / wall_s, 1)}


def worker_counts(text: str) -> list[int]:
    """`--workers`: positive worker counts separated by commas, each measured in turn."""
    return separated_by_commas(text, positive_int, "positive integers", "1,2")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sweep_speed.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="tiny", help="bundled scenario or YAML file (default tiny)")
    parser.add_argument("--points", type=positive_int, default=16, help="points per sweep (default 16)")
    parser.add_argument("--workers", type=worker_counts, default="1,2", help="worker counts to measure (default 1,2)")
    parser.add_argument("--json", action="store_true", help="print one JSON line on stdout")
    args = parser.parse_args(argv)
    from rlix.scenarios import load_scenario
    from rlix.scenarios.errors import ScenarioError

    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as error:
        parser.error(" ".join(str(error).split()))
    runs = []
    for workers in args.workers:
        run = measure(scenario, args.points, workers)
        print(f"{args.scenario}: {args.points} points, {workers} worker(s): {run['wall_s']:.1f} s, "
              f"{run['points_per_min']:.1f} points/min", file=sys.stderr if args.json else sys.stdout, flush=True)
        runs.append(run)
    if args.json:
        print(json.dumps({"bench": "sweep_speed", "scenario": args.scenario, "points": args.points, "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
