"""Offline validation of the simulator: calibrated on one live run, does it predict live runs
it has not seen? The parts of `bench/fidelity.py` and `notebooks/sim_vs_exec.ipynb`.

1. `calibrate`: run the bundled cpu-demo live on the CPU executor (or take a given live run
   folder) and calibrate the simulator on it (rlix.sim.calibrate: cost constants, and the
   run's rollout lengths as the trace the simulator replays).
2. `predict_and_run`: for an unseen config (`VARIANTS`, variants of cpu-demo), predict it with
   the calibrated simulator, run it live, and `compare` the two: makespan, mean step time per
   pipeline, busy / loading / idle shares of the pool, preemptions; errors are
   |pred - meas| / meas.
3. `plot_side_by_side`: the Gantt of one predicted run over its live run.

The report and the tables of the errors are in `rlix.studies.fidelity_report`; the configs (cpu-demo
as plain data, the unseen variants) in `rlix.studies.fidelity_configs`.

Both drivers get the same scenario (`scenario_data`), its `engine:` section included: the
executor's rollout ranks take `max_batch` trajectories a call, balanced or not, as the simulator's
engines admit them (cpu-demo says the executor's 8 a call, no router). Beside the prediction with the constants as
calibrated, two rescaled to the other work's CPU demand are reported (`*_error_load`,
`*_error_hindsight`; docs/calibration.md), and, when the calibration read runs of two
concurrencies (`calibrate(..., second=...)`), the prediction with the per-op slowdown across
configs (rlix.sim.concurrency; `*_error_contention`, `predict_with_concurrency`). The executor (Ray, torch) is imported only by the
functions that run live.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from rlix.studies.fidelity_configs import (  # noqa: F401  (re-exported: the runs take them from here)
    SECOND_CALIBRATION,
    VARIANTS,
    Variant,
    gpus_needed,
    scenario_data,
)


def live_backend_problem(backend: str, num_gpus: int) -> str | None:
    """Why the live runs cannot use `backend` on this machine (None: they can). The hf backend
    runs anywhere (on CPU, declared GPUs are Ray resources); vllm needs as many CUDA devices as
    the configs declare, and vllm installed."""
    if backend == "hf":
        return None
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        return f"the {backend} backend needs NVIDIA GPUs and torch sees no CUDA device here; use the hf backend"
    found = torch.cuda.device_count()
    if found < num_gpus:
        return f"the configs declare up to {num_gpus} GPUs and this machine has {found} CUDA devices"
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (pip install 'rlix[gpu]' on a GPU machine)"
    return None


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
    """The predicted run's Gantt (rlix.runs.plots.gantt) above the live run's, one time axis,
    written to `out` (a PNG). Leaves matplotlib's backend as it is (a notebook's stays inline)."""
    import io

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


def calibrate(out: Path, live_dir: Path | None, reuse: bool = False,
              steps: int | None = None, second: str | Path | None = None,
              executor: dict[str, Any] | None = None) -> tuple[Path, Path, Path]:
    """The calibration run (made unless given: cpu-demo, cut to `steps` if given), its cost
    file and its rollout lengths. The other work's CPU demand is probed before the run as before
    each predicted one, and the cost file says that (the same instrument on both sides of a
    rescaling). With `second` (a SECOND_CALIBRATION name, run live, or a live run folder) the
    calibration reads that run too, and fits the per-op slowdown against run concurrency
    (rlix.sim.concurrency; the first run is the reference). `executor`: as in `scenario_data`,
    for the live runs."""
    from rlix.scenarios.costs import write_costs_file
    from rlix.sim.calibrate import fit_runs, write_trace
    from rlix.sim.cpu_work import write_fit

    background = None
    if live_dir is None:
        background = probe(out / "calibration", reuse)
        live_dir = run_live(scenario_data(None, steps=steps, executor=executor), out / "calibration" / "live", reuse)
    runs, configs = [live_dir], [scenario_data(None, steps=steps, executor=executor)]  # configs: those known
    if isinstance(second, str) and second in SECOND_CALIBRATION:
        configs.append(scenario_data(SECOND_CALIBRATION[second], steps=steps, executor=executor))
        runs.append(run_live(configs[-1], out / f"calibration-{second}" / "live", reuse))
    elif second is not None:
        runs.append(Path(second))
    costs, trace = out / "costs.yaml", out / "lengths.parquet"
    write_fit(out / "cpu_work.json", runs, configs)
    calibrated = fit_runs(runs).costs_file()
    if background is not None and calibrated.machine:
        calibrated = calibrated.model_copy(update={"machine": {**calibrated.machine, "background_demand": background}})
    write_costs_file(calibrated, costs)
    write_trace(runs, trace)
    return live_dir, costs, trace


def predict_cpu_bound(variant: Variant, folder: Path, calibrated: Any, fit: dict[str, Any], trace: Path | None,
                      steps: int | None, first: Path, max_runs: int = 5,
                      tolerance: float = 0.02) -> tuple[Path, list[float]]:
    """The prediction of a CPU-bound live run (rlix.sim.cpu_work): the simulator's op constants
    (rlix.sim.concurrency.SCALED) scaled by one factor until its makespan is the config's CPU
    work over the calibration runs' cores (within `tolerance`, at most `max_runs` runs,
    `first`, made on the constants as calibrated, counted). Start-up is not scaled: it was
    measured under the same load. Returns the folder of the run nearest the target and the
    factors used up to it (its own last)."""
    from rlix.sim.concurrency import SCALED
    from rlix.sim.cpu_work import cpu_bound_makespan_s

    target = cpu_bound_makespan_s(fit, scenario_data(variant, steps=steps), simulated_loads(first))
    runs, factors, made = [first], [1.0], [_makespan_s(first)]
    for index in range(1, max_runs):
        if target <= 0 or abs(made[-1] - target) <= tolerance * target:
            break
        # Start-up does not scale, so the makespan moves less than the factor: the step is
        # stretched (x1.5 in log), and the schedule may jump between runs, so the run kept
        # is the nearest to the target, not the last.
        scale = factors[-1] * (target / made[-1]) ** 1.5
        costs = {k: v * scale if k in SCALED else v for k, v in calibrated.costs.items()}
        runs.append(run_sim(scenario_data(variant, trace, costs, steps), folder / f"sim-cpu-{index}"))
        factors.append(scale)
        made.append(_makespan_s(runs[-1]))
    best = min(range(len(runs)), key=lambda i: abs(made[i] - target))
    return runs[best], factors[: best + 1]


def simulated_loads(run_dir: Path) -> int:
    """Weight loads in a run folder (its `activity` load spans, one per rank and start)."""
    from rlix.runs.reader import load

    activity = load(run_dir).activity
    loads = activity[activity["stage"] == "load"]
    return int(len(loads.drop_duplicates(["pipeline_id", "dp_rank", "t_start"])))


def _makespan_s(run_dir: Path) -> float:
    return float(json.loads((run_dir / "summary.json").read_text())["makespan_s"])


def probe(folder: Path, reuse: bool) -> float | None:
    """Other work's CPU demand now (3 s; rlix.executor.machine), kept in `folder` for `reuse`."""
    from rlix.executor.machine import probe_background

    folder.mkdir(parents=True, exist_ok=True)
    probe_file = folder / "background.json"
    if reuse and probe_file.is_file():
        value: float | None = json.loads(probe_file.read_text())["background_demand"]
        return value
    value = probe_background(3.0)
    probe_file.write_text(json.dumps({"background_demand": value}))
    return value


def predict_and_run(name: str, out: Path, costs: Path, trace: Path, reuse: bool,
                    steps: int | None = None, executor: dict[str, Any] | None = None
                    ) -> tuple[dict[str, Any], Path, Path]:
    """Predict config `name` with the constants as calibrated, then run it live (both cut to
    `steps` if given; the live run with the `executor` settings, as in `scenario_data`). Two more predictions are reported beside it: rescaled to the other
    work's CPU demand probed just before the run (`*_error_load`), and in hindsight to the
    demand the live run measured (`*_error_hindsight`, not a prediction)."""
    from rlix.scenarios.costs import read_costs_file
    from rlix.sim.calibrate import costs_for_background

    variant, folder = VARIANTS[name], out / name
    background = probe(folder, reuse)
    calibrated = read_costs_file(costs)
    sim_dir = run_sim(scenario_data(variant, trace, dict(calibrated.costs), steps), folder / "sim")
    live_dir = run_live(scenario_data(variant, steps=steps, executor=executor), folder / "live", reuse)
    row = compare(name, sim_dir, live_dir)
    measured = json.loads((live_dir / "summary.json").read_text()).get("machine", {}).get("background_demand")
    row["background_probe_demand"], row["background_run_demand"] = background, measured
    for label, demand in (("load", background), ("hindsight", measured)):
        if demand is not None and calibrated.machine:
            scaled = run_sim(scenario_data(variant, trace, costs_for_background(calibrated, demand), steps),
                             folder / f"sim-{label}")
            again = compare(name, scaled, live_dir)
            row[f"makespan_error_{label}"], row[f"step_time_error_{label}"] = again["makespan_error"], again["step_time_error"]
    from rlix.runs.reader import load
    from rlix.sim.concurrency import run_concurrency

    row["concurrency_meas"] = run_concurrency(load(live_dir).activity)
    def rescaled(run: Path, suffix: str) -> dict[str, Any]:
        """A rescaled prediction's figures beside the first's, under `suffix`."""
        again = compare(name, run, live_dir)
        for figure in ("makespan_pred_s", "makespan_error", "step_time_error"):
            row[f"{figure}_{suffix}"] = again[figure]
        return again

    cpu_fit_file = out / "cpu_work.json"
    cpu_fit = json.loads(cpu_fit_file.read_text()) if cpu_fit_file.is_file() else {}
    if cpu_fit.get("fitted"):
        last, factors = predict_cpu_bound(variant, folder, calibrated, cpu_fit, trace, steps, sim_dir)
        row["step_time_errors_cpu"], row["cpu_factors"] = rescaled(last, "cpu")["step_time_errors"], factors
    if calibrated.concurrency.get("fitted"):
        def contended(costs_file: Any, suffix: str) -> tuple[dict[str, Any], list[float]]:
            last, history = predict_with_concurrency(variant, folder, costs_file, trace, steps, sim_dir,
                                                     label=f"sim-{suffix}")
            return rescaled(last, suffix), history

        again, history = contended(calibrated, "contention")
        row["step_time_errors_contention"] = again["step_time_errors"]
        row["concurrency_pred"], row["concurrency_runs"] = history[-1], history
        as_simulated = simulated_concurrency_fit(calibrated, trace, steps, out, reuse)
        if as_simulated.concurrency.get("fitted"):
            row["concurrency_runs_simc"] = contended(as_simulated, "contention_simc")[1]
    return row, sim_dir, live_dir


def simulated_concurrency_fit(calibrated: Any, trace: Path, steps: int | None, out: Path, reuse: bool) -> Any:
    """The cost file with its per-op slowdown refitted against the concurrency the simulator
    gives each calibration run's config (replayed on the reference constants), not the live
    run's: the simulator counts a rollout rank busier than a live one (its spans cover a rank's
    decoding, not only its engine calls), so the predicted run's concurrency is set against
    the calibration's as the simulator counts both. Each calibration run's config is told from
    its folder's name (calibration: cpu-demo; calibration-<name>: SECOND_CALIBRATION[name])."""
    from rlix.runs.reader import load
    from rlix.sim.concurrency import fit_concurrency, run_concurrency

    names = [Path(r["run"]).parent.name for r in calibrated.concurrency["runs"]]
    variants = {"calibration": None, **{f"calibration-{k}": v for k, v in SECOND_CALIBRATION.items()}}
    if any(name not in variants for name in names):
        return calibrated.model_copy(update={"concurrency": {}})
    simulated = []
    for name in names:
        # The same replay for every config predicted: made once for these inputs (the
        # simulator is deterministic), then read back.
        folder, inputs = out / "simc" / name, json.dumps([calibrated.costs, str(trace), steps], sort_keys=True)
        made = folder.with_name(f"{name}.inputs.json")
        if not ((reuse or made.is_file() and made.read_text() == inputs) and (folder / "summary.json").is_file()):
            run_sim(scenario_data(variants[name], trace, dict(calibrated.costs), steps), folder)
            made.write_text(inputs)
        simulated.append(run_concurrency(load(folder).activity))
    runs = [(r["run"], load(r["run"]).activity) for r in calibrated.concurrency["runs"]]
    return calibrated.model_copy(update={"concurrency": fit_concurrency(runs, simulated)})


def predict_with_concurrency(variant: Variant, folder: Path, calibrated: Any, trace: Path, steps: int | None,
                             first: Path, max_runs: int = 3, tolerance: float = 0.02,
                             label: str = "sim-contention") -> tuple[Path, list[float]]:
    """The prediction with the per-op slowdown across configs (rlix.sim.concurrency): the run
    `first` (made on the constants at the reference concurrency) says the config's concurrency
    C; the constants rescaled to C (costs_at) make the next run, whose C makes the next, until C
    moves less than `tolerance` (relative) or `max_runs` runs were made (`first` counted).
    Returns the last run's folder and the concurrencies that were used, in order."""
    from rlix.runs.reader import load
    from rlix.sim.concurrency import costs_at, run_concurrency

    current, history = first, [run_concurrency(load(first).activity)]
    for index in range(1, max_runs):
        current = run_sim(scenario_data(variant, trace, costs_at(calibrated, history[-1]), steps),
                          folder / f"{label}-{index}")
        measured = run_concurrency(load(current).activity)
        moved = abs(measured - history[-1]) / history[-1] if history[-1] else 0.0
        history.append(measured)
        if moved < tolerance:
            break
    return current, history
