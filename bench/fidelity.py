"""Does the simulator, calibrated on one live run, predict live runs it has not seen?

1. Run the bundled cpu-demo live on the CPU executor (tiny Qwen2, hf backend, 4 declared GPUs)
   and calibrate the simulator on it (`rlix-sim calibrate`: cost constants, and the run's
   rollout lengths as the trace the simulator replays).
2. For each unseen config (variants of cpu-demo: a pipeline added, two declared GPUs instead of
   four, staleness 1 everywhere, the static policy), run it live and in the calibrated
   simulator, and set the two side by side: makespan, mean step time per pipeline, busy /
   loading / idle shares of the pool, preemptions; errors are |pred - meas| / meas (shares:
   the absolute difference in points as well).
3. Draw sim_vs_exec.png: the Gantt of one predicted run over its live run.

Both drivers get the same scenario; its `engine:` section is set to what the executor does
(a rank takes up to 8 trajectories per call, no balancing router, no migration), which the
executor ignores. The machine has 2 cores, shared with whatever else runs. The prediction uses the constants as
calibrated. Reported beside it: the other work's CPU demand probed for 3 s before each live
run (the calibration too; rlix.executor.machine) and the prediction rescaled to it
(rlix.sim.calibrate.costs_for_background, `*_error_load`), and in hindsight to the demand the
live run measured (`*_error_hindsight`; not a prediction). On this machine neither rescaling
has helped consistently (docs/calibration.md).

    .venv/bin/python bench/fidelity.py [--out DIR] [--configs two-gpus,static] [--json]

`--json` prints one line: {"configs": [{"name", "makespan_error", "step_time_error", ...}],
"median_step_time_error", "max_makespan_error", ...}. Takes ~10-15 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Variant = Callable[[dict[str, Any]], dict[str, Any]]
#: What the executor does, said to the simulator (PipelineSetup.max_batch_per_rank is 8; each
#: rank takes from the shared queue, no router; nothing migrates when a rank joins).
ENGINE = {"max_batch": 8, "balance": False, "migrate_on_expand": False}


def _added_pipeline(data: dict[str, Any]) -> dict[str, Any]:
    ft2 = {**data["pipelines"][0], "id": "ft2", "home": "2-3",
           "clusters": {"actor_train": {"tp": 1, "gpus": "2-3"}, "actor_infer": {"tp": 1, "gpus": "2-3,0-1"}}}
    return {**data, "pipelines": [*data["pipelines"], ft2]}


def _two_gpus(data: dict[str, Any]) -> dict[str, Any]:
    ft, lora = (dict(p) for p in data["pipelines"])
    ft.update(home="0", clusters={"actor_train": {"tp": 1, "gpus": "0"}, "actor_infer": {"tp": 1, "gpus": "0-1"}})
    lora.update(home="1", clusters={"actor_train": {"tp": 1, "gpus": "1"}, "actor_infer": {"tp": 1, "gpus": "1,0"}})
    return {**data, "topology": {**data["topology"], "gpus_per_node": 2}, "pipelines": [ft, lora]}


def _staleness_one(data: dict[str, Any]) -> dict[str, Any]:
    ft, lora = (dict(p) for p in data["pipelines"])
    ft["max_staleness"] = 1
    lora["adapters"] = [{**a, "max_staleness": 1} for a in lora["adapters"]]
    return {**data, "pipelines": [ft, lora]}


def _static(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "policy": {**data["policy"], "name": "static"}}


VARIANTS: dict[str, Variant] = {
    "pipeline-added": _added_pipeline, "two-gpus": _two_gpus, "staleness-1": _staleness_one, "static": _static,
}


def scenario_data(variant: Variant | None, trace: Path | None = None,
                  costs: Path | dict[str, float] | None = None) -> dict[str, Any]:
    """cpu-demo as plain data, the engine said as the executor runs it, then `variant`; with
    `trace` and `costs`, the calibrated simulator's inputs."""
    from rlix.scenarios import load_scenario

    data = load_scenario("cpu-demo").model_dump(mode="json", exclude_none=True)
    data["engine"] = {**data.get("engine", {}), **ENGINE}
    if variant is not None:
        data = variant(data)
    if trace is not None:
        ref = {"path": str(trace)}
        data["trace"] = ref
        for pipeline in data["pipelines"]:
            pipeline["trace"] = ref
            for adapter in pipeline.get("adapters", []):
                adapter["trace"] = ref
    if costs is not None:
        data["costs"] = dict(costs) if isinstance(costs, dict) else str(costs)
    return data


def run_live(data: dict[str, Any], out: Path, reuse: bool = False) -> Path:
    """The config run live into `out` (with `reuse`, a finished run already there is kept)."""
    from rlix.executor.live import execute
    from rlix.executor.run import plan
    from rlix.scenarios.load import validate_scenario

    if reuse and (out / "summary.json").is_file() and json.loads((out / "summary.json").read_text())["finished"]:
        return out
    result = execute(plan(validate_scenario(data)), out_dir=out, quiet=True, overwrite=True, timeout_s=1800)
    if not result.finished or result.out_dir is None:
        raise RuntimeError(f"live run {out} did not finish: {result.stop_reason}")
    return Path(result.out_dir)


def run_sim(data: dict[str, Any], out: Path) -> Path:
    from rlix.scenarios.load import validate_scenario
    from rlix.sim import simulate

    result = simulate(validate_scenario(data), out=out, overwrite=True)
    assert result.run_dir is not None
    return Path(result.run_dir)


def _error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None or measured == 0:
        return None
    return abs(predicted - measured) / abs(measured)


def compare(name: str, sim_dir: Path, live_dir: Path) -> dict[str, Any]:
    """Predicted against measured figures of one config, with errors."""
    pred = json.loads((sim_dir / "summary.json").read_text())
    meas = json.loads((live_dir / "summary.json").read_text())
    row: dict[str, Any] = {"name": name, "makespan_pred_s": pred["makespan_s"], "makespan_meas_s": meas["makespan_s"],
                           "makespan_error": _error(pred["makespan_s"], meas["makespan_s"])}
    step_errors = {}
    for pid, figures in meas["pipelines"].items():
        predicted = pred["pipelines"].get(pid, {}).get("mean_step_time_s")
        row[f"step_time_pred_s.{pid}"] = predicted
        row[f"step_time_meas_s.{pid}"] = figures["mean_step_time_s"]
        step_errors[pid] = _error(predicted, figures["mean_step_time_s"])
    row["step_time_errors"] = step_errors
    known = [e for e in step_errors.values() if e is not None]
    row["step_time_error"] = statistics.mean(known) if known else None
    for share in ("busy_share", "loading_share", "idle_share"):
        p, m = pred["overall"][share], meas["overall"][share]
        row[f"{share}_pred"], row[f"{share}_meas"] = p, m
        row[f"{share}_error"] = _error(p, m)
        row[f"{share}_points"] = None if p is None or m is None else abs(p - m)
    row["preemptions_pred"], row["preemptions_meas"] = pred["overall"]["preemptions"], meas["overall"]["preemptions"]
    row["preemptions_error"] = _error(row["preemptions_pred"], row["preemptions_meas"])
    return row


def plot_side_by_side(sim_dir: Path, live_dir: Path, out: Path) -> Path:
    """The predicted run's Gantt (rlix.runs.plots.gantt) above the live run's, one time axis."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from rlix.runs.plots import gantt, pipeline_colours
    from rlix.runs.reader import load

    runs = [load(sim_dir).tables(), load(live_dir).tables()]
    colours = pipeline_colours(sorted(set(runs[0].pipeline_ids) | set(runs[1].pipeline_ids)))
    span = max(t.makespan_s for t in runs)
    images = []
    for tables, label in zip(runs, ("predicted (simulator)", "measured (executor)"), strict=True):
        figure = plt.figure()
        gantt(figure, tables, colours)  # sizes the figure by the GPU count: the same for both
        axis = figure.axes[0]
        axis.set_xlim(0, span)
        axis.set_title(f"{label}: {tables.makespan_s:.1f} s, {tables.policy}, {tables.num_gpus} GPUs")
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")  # the legend kept
        plt.close(figure)
        buffer.seek(0)
        images.append(plt.imread(buffer))
    width = max(image.shape[1] for image in images)
    padded = [np.pad(image, ((0, 0), (0, width - image.shape[1]), (0, 0)), constant_values=1.0) for image in images]
    plt.imsave(out, np.concatenate(padded, axis=0))
    return out


def calibrate(out: Path, live_dir: Path | None, reuse: bool = False) -> tuple[Path, Path, Path]:
    """The calibration run (made unless given), its cost file and its rollout lengths. The
    other work's CPU demand is probed before the run as before each predicted one, and the
    cost file says that (the same instrument on both sides of a rescaling)."""
    from rlix.scenarios.costs import write_costs_file
    from rlix.sim.calibrate import fit_runs, write_trace

    background = None
    if live_dir is None:
        background = _probe(out / "calibration", reuse)
        live_dir = run_live(scenario_data(None), out / "calibration" / "live", reuse)
    costs, trace = out / "costs.yaml", out / "lengths.parquet"
    calibrated = fit_runs([live_dir]).costs_file()
    if background is not None and calibrated.machine:
        calibrated = calibrated.model_copy(update={"machine": {**calibrated.machine, "background_demand": background}})
    write_costs_file(calibrated, costs)
    write_trace([live_dir], trace)
    return live_dir, costs, trace


def _probe(folder: Path, reuse: bool) -> float | None:
    """Other work's CPU demand now (3 s; rlix.executor.machine), kept in `folder` for --reuse."""
    from rlix.executor.machine import probe_background

    folder.mkdir(parents=True, exist_ok=True)
    probe_file = folder / "background.json"
    if reuse and probe_file.is_file():
        value: float | None = json.loads(probe_file.read_text())["background_demand"]
        return value
    value = probe_background(3.0)
    probe_file.write_text(json.dumps({"background_demand": value}))
    return value


def predict_and_run(name: str, out: Path, costs: Path, trace: Path, reuse: bool) -> tuple[dict[str, Any], Path, Path]:
    """Predict config `name` with the constants as calibrated, then run it live. Two more
    predictions are reported beside it: rescaled to the other work's CPU demand probed just
    before the run (`*_error_load`), and in hindsight to the demand the live run measured
    (`*_error_hindsight`, not a prediction)."""
    from rlix.scenarios.costs import read_costs_file
    from rlix.sim.calibrate import costs_for_background

    variant, folder = VARIANTS[name], out / name
    background = _probe(folder, reuse)
    calibrated = read_costs_file(costs)
    sim_dir = run_sim(scenario_data(variant, trace, dict(calibrated.costs)), folder / "sim")
    live_dir = run_live(scenario_data(variant), folder / "live", reuse)
    row = compare(name, sim_dir, live_dir)
    measured = json.loads((live_dir / "summary.json").read_text()).get("machine", {}).get("background_demand")
    row["background_probe_demand"], row["background_run_demand"] = background, measured
    for label, demand in (("load", background), ("hindsight", measured)):
        if demand is not None and calibrated.machine:
            scaled = run_sim(scenario_data(variant, trace, costs_for_background(calibrated, demand)), folder / f"sim-{label}")
            again = compare(name, scaled, live_dir)
            row[f"makespan_error_{label}"], row[f"step_time_error_{label}"] = again["makespan_error"], again["step_time_error"]
    return row, sim_dir, live_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/fidelity", help="where run folders, costs and the plot go")
    parser.add_argument("--configs", default=",".join(VARIANTS), help=f"unseen configs, of {','.join(VARIANTS)}")
    parser.add_argument("--calibration-run", type=Path, help="calibrate on this live run folder instead of a new one")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the finished live runs already in --out (predict again, do not run again)")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args(argv)
    names = [n for n in args.configs.split(",") if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or not names:
        parser.error(f"--configs: unknown {unknown} (known: {', '.join(VARIANTS)})")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # Ray's workers print to this process's stdout: with --json it carries one line only.
    stdout = os.fdopen(os.dup(1), "w") if args.json else sys.stdout
    if args.json:
        os.dup2(2, 1)
    t0 = time.monotonic()
    cal_dir, costs, trace = calibrate(out, args.calibration_run, args.reuse)
    rows, first = [], None
    for name in names:
        row, sim_dir, live_dir = predict_and_run(name, out, costs, trace, args.reuse)
        rows.append(row)
        first = first or (sim_dir, live_dir)
        print(f"{name}: done ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    assert first is not None
    plot = plot_side_by_side(*first, out / "sim_vs_exec.png")
    report = summarize(rows, cal_dir, costs, plot, time.monotonic() - t0)
    if args.json:
        print(json.dumps(report, sort_keys=True), file=stdout, flush=True)
    else:
        print_table(report)
    return 0


def summarize(rows: list[dict[str, Any]], cal_dir: Path, costs: Path, plot: Path, wall_s: float) -> dict[str, Any]:
    steps = [r["step_time_error"] for r in rows if r["step_time_error"] is not None]
    spans = [r["makespan_error"] for r in rows if r["makespan_error"] is not None]
    return {"configs": rows, "calibration_run": str(cal_dir), "costs": str(costs), "plot": str(plot),
            "median_step_time_error": statistics.median(steps) if steps else None,
            "median_makespan_error": statistics.median(spans) if spans else None,
            "max_makespan_error": max(spans) if spans else None,
            "max_step_time_error": max(steps) if steps else None, "wall_s": wall_s}


def print_table(report: dict[str, Any]) -> None:
    print(f"{'config':<16} {'makespan pred/meas s':>22} {'err':>6} {'step err':>9} "
          f"{'busy p/m':>12} {'loading p/m':>12} {'idle p/m':>12} {'preempt p/m':>12}")
    for r in report["configs"]:
        shares = "".join(f" {r[f'{s}_pred']:>5.0%}/{r[f'{s}_meas']:<5.0%}" for s in ("busy_share", "loading_share", "idle_share"))
        print(f"{r['name']:<16} {r['makespan_pred_s']:>10.1f}/{r['makespan_meas_s']:<10.1f} {r['makespan_error']:>6.1%} "
              f"{r['step_time_error']:>9.1%} {shares} {r['preemptions_pred']:>5}/{r['preemptions_meas']:<5}")
    print(f"median step-time error {report['median_step_time_error']:.1%}, "
          f"median makespan error {report['median_makespan_error']:.1%}, max {report['max_makespan_error']:.1%}; "
          f"plot {report['plot']}; {report['wall_s']:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
