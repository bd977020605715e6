"""How far apart live runs of one config land: the floor under any prediction from one run.

The fidelity check (rlix.studies.fidelity) calibrates on one live run and predicts another. If two
live runs of the *same* config differ by x, no model calibrated on one of them can be trusted
to predict the other closer than x: the error a perfect simulator would still show. This
module runs a config live several times, back to back, and measures that floor:

- `run_repeats`: the config run live `repeats` times, each with the machine's speed gauged
  before and after (rlix.executor.machine.cpu_speed_s: the CPU time a fixed piece of work
  takes, which moves with the host's other tenants though no busy share shows it);
- `pairwise`: every ordered pair of runs (i, j), run i taken as the prediction of run j, with
  the errors of the fidelity check (`compare`: makespan, mean step time over pipelines);
- `same_config`: the simulator calibrated on each run in turn and set against every other run
  of the config: the model's own error on a config it has seen, over the floor;
- `summarize`: medians and maxima of both, the spread of each figure, and how the runs' CPU
  work and makespans follow the machine's speed.
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlix.studies.fidelity import compare, run_live, run_sim
from rlix.studies.fidelity_configs import Variant, scenario_data
from rlix.studies.fidelity_report import error_stats

#: Samples of the speed gauge before and after each run (each ~0.02-0.03 s of work).
SPEED_SAMPLES = 41


def speed(folder: Path, label: str, reuse: bool) -> float | None:
    """The machine's speed gauge now (median CPU seconds of a fixed piece of work), kept in
    `folder`/speed.json under `label` for `reuse`."""
    from rlix.executor.machine import cpu_speed_s

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "speed.json"
    known = json.loads(path.read_text()) if path.is_file() else {}
    if not (reuse and label in known):
        known[label] = cpu_speed_s(repeats=SPEED_SAMPLES)
        path.write_text(json.dumps(known))
    value = known.get(label)
    return float(value) if value is not None else None


def run_repeats(variant: Variant | None, out: Path, repeats: int, reuse: bool = False, steps: int | None = None,
                progress: Callable[[int, Path], None] | None = None) -> list[Path]:
    """The config (cpu-demo, then `variant`) run live `repeats` times into out/run-1.. (with
    `reuse`, finished runs already there are kept), the speed gauged around each."""
    runs = []
    for index in range(1, repeats + 1):
        folder = out / f"run-{index}"
        speed(folder, "before", reuse)
        runs.append(run_live(scenario_data(variant, steps=steps), folder / "live", reuse))
        speed(folder, "after", reuse)
        if progress is not None:
            progress(index, runs[-1])
    return runs


def run_row(live_dir: Path) -> dict[str, Any]:
    """One live run's figures: makespan, mean step time per pipeline, CPU work, the speed gauge."""
    summary = json.loads((live_dir / "summary.json").read_text())
    machine = summary.get("machine", {})
    gauge_path = live_dir.parent / "speed.json"
    gauge = json.loads(gauge_path.read_text()) if gauge_path.is_file() else {}
    known = [v for v in (gauge.get("before"), gauge.get("after")) if v is not None]
    return {"run": str(live_dir), "makespan_s": summary["makespan_s"],
            "step_time_s": {pid: p["mean_step_time_s"] for pid, p in summary["pipelines"].items()},
            "own_cpu_s": machine.get("own_cpu_s"), "machine_busy_share": machine.get("machine_busy_share"),
            "speed_s": statistics.mean(known) if known else None}


def pairwise(name: str, runs: Sequence[Path]) -> list[dict[str, Any]]:
    """Every ordered pair (i, j), i != j: run i as the prediction of run j (`compare` rows)."""
    rows = []
    for i, j in itertools.permutations(range(len(runs)), 2):
        row = compare(name, runs[i], runs[j])
        row["pair"] = [i + 1, j + 1]
        rows.append(row)
    return rows


def same_config(name: str, variant: Variant | None, runs: Sequence[Path], out: Path,
                steps: int | None = None) -> list[dict[str, Any]]:
    """The simulator calibrated on each run in turn (its constants and rollout lengths), the
    config simulated, and set against every other run (`compare` rows, `pair` as above)."""
    from rlix.sim.calibrate import fit_runs, write_trace

    rows = []
    for i, run in enumerate(runs):
        folder = out / f"calibrated-on-{i + 1}"
        folder.mkdir(parents=True, exist_ok=True)
        trace = folder / "lengths.parquet"
        write_trace([run], trace)
        costs = dict(fit_runs([run]).costs_file().costs)
        sim_dir = run_sim(scenario_data(variant, trace, costs, steps), folder / "sim")
        for j, other in enumerate(runs):
            if j != i:
                row = compare(name, sim_dir, other)
                row["pair"] = [i + 1, j + 1]
                rows.append(row)
    return rows


def _spread(values: Sequence[float]) -> dict[str, float]:
    mean = statistics.mean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": mean, "min": min(values), "max": max(values), "cv": sd / mean if mean else 0.0}


def _correlation(xs: Sequence[float | None], ys: Sequence[float | None]) -> float | None:
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if x is not None and y is not None]
    if len(pairs) < 3:
        return None
    try:
        return statistics.correlation([p[0] for p in pairs], [p[1] for p in pairs])
    except statistics.StatisticsError:  # a constant series
        return None


def summarize(name: str, runs: Sequence[Path], pairs: Sequence[dict[str, Any]],
              predicted: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The floor of one config: its runs, the spread of each figure, the pairwise errors (and,
    with `predicted`, the calibrated simulator's), how CPU work and makespan follow speed."""
    rows = [run_row(run) for run in runs]
    report: dict[str, Any] = {"config": name, "runs": rows, "makespan_s": _spread([r["makespan_s"] for r in rows])}
    cpu = [r["own_cpu_s"] for r in rows if r["own_cpu_s"] is not None]
    if cpu:
        report["own_cpu_s"] = _spread(cpu)
    report["step_time_s"] = {pid: _spread([r["step_time_s"][pid] for r in rows]) for pid in rows[0]["step_time_s"]}
    report.update(error_stats(list(pairs), prefix="floor_"))
    if predicted:
        report.update(error_stats(list(predicted), prefix="sim_"))
    speeds = [r["speed_s"] for r in rows]
    report["speed_vs_own_cpu"] = _correlation(speeds, [r["own_cpu_s"] for r in rows])
    report["speed_vs_makespan"] = _correlation(speeds, [r["makespan_s"] for r in rows])
    return report
