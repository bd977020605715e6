"""Points per minute of `rlix-sim sweep` with 1 and 2 local Ray workers.

    python bench/sweep_speed.py [--scenario tiny] [--points 16] [--workers 1,2] [--json]

Each measurement is a fresh sweep (a new folder: nothing skipped) of `--points` points of one
scenario (a `seed` axis), timed from the call to the last row written, Ray's start included,
as a user waits for it. The last line with `--json`: `{"bench": "sweep_speed", "scenario",
"points", "runs": [{"workers", "wall_s", "points_per_min"}]}`.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def measure(scenario: str, num_points: int, workers: int) -> dict[str, float]:
    from rlix.scenarios import load_scenario
    from rlix.studies.grid import parse_grid
    from rlix.studies.sweep import run_sweep

    grid = parse_grid([f"seed={','.join(str(s) for s in range(num_points))}"])
    with tempfile.TemporaryDirectory() as folder:
        started = time.monotonic()
        result = run_sweep(load_scenario(scenario), grid, Path(folder) / "sweep", workers=workers)
        wall_s = time.monotonic() - started
    if result.num_failed:
        raise SystemExit(f"{result.num_failed} point(s) failed: {result.rows.error.tolist()}")
    return {"workers": workers, "wall_s": round(wall_s, 2), "points_per_min": round(60 * num_points / wall_s, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="tiny", help="bundled scenario or YAML file (default tiny)")
    parser.add_argument("--points", type=int, default=16, help="points per sweep (default 16)")
    parser.add_argument("--workers", default="1,2", help="worker counts to measure (default 1,2)")
    parser.add_argument("--json", action="store_true", help="print one JSON line at the end")
    args = parser.parse_args()
    runs = []
    for workers in (int(w) for w in args.workers.split(",")):
        run = measure(args.scenario, args.points, workers)
        print(f"{args.scenario}: {args.points} points, {workers} worker(s): {run['wall_s']:.1f} s, "
              f"{run['points_per_min']:.1f} points/min", flush=True)
        runs.append(run)
    if args.json:
        print(json.dumps({"bench": "sweep_speed", "scenario": args.scenario, "points": args.points, "runs": runs}))


if __name__ == "__main__":
    main()
