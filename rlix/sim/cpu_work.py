"""Predicting a live run on CPU-declared GPUs from the CPU work it will do.

On a machine whose declared GPUs share a few cores (the CPU executor), a live run keeps the
cores busy from start to end (cpu-demo configs: 96-99% of 2 cores), so its wall time is its CPU
work over the cores it gets. That work has four parts (docs/calibration.md):

- per step trained (rollout, log-probs, training, the driver's bookkeeping): `cpu_per_step_s`,
  the same whatever the GPUs declared;
- per rollout worker started (a process that imports torch and builds the model; the executor
  starts one for every rank of a pipeline's rollout mapping): `cpu_per_worker_s`, ~4.5 CPU-s,
  and a multi-LoRA pipeline's (which loads the adapter library too) `cpu_per_worker_multi_lora_s`
  when the runs started both kinds;
- per weight load (a wake and its sleep): `cpu_per_load_s`;
- per worker up, idle or not, per second: `idle_cores_per_worker` (Ray's threads, the event
  loop).

Each worker reports what its start took (`summary.json` `machine.worker_start_cpu_s`) and,
when its pipeline ends, where its CPU went (`machine.worker_cpu`), so the last three are
measured, not fitted, in runs that recorded them, and the per-step part is what is left.

The per-op durations a run measures are that CPU shared, so the span concurrency of
rlix.sim.concurrency cannot see the worker starts: a start is no span of work.

`fit_cpu_work` gets them from live calibration runs (each run's `summary.json`
`machine.own_cpu_s`, its steps and workers; one run is enough when its workers reported their
start, else runs of different worker counts are needed), with the cores the runs got
(`own_cores`) and the gap between the driver's wall time and the run's makespan (the driver
starts before the first arrival). `cpu_bound_makespan_s` is then a config's predicted
makespan, given the loads the simulator makes in it. `predict_cpu_bound` (rlix.studies.fidelity)
rescales the simulator's op constants until its makespan matches that figure, so that the
schedule (each pipeline's steps, the shares) is the simulator's while the speed is the
machine's. It applies only to runs that were bound by
their CPU (every calibration run's machine at least `MIN_BUSY_SHARE` busy).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlix.sim.calibrate_fits import nonnegative_lstsq

#: Below this share of the machine busy over a calibration run, the run was not bound by CPU
#: work and its wall time does not follow from it.
MIN_BUSY_SHARE = 0.9


def workers_started(data: Mapping[str, Any]) -> int:
    """Rollout workers a live run of scenario `data` (plain data) starts: one per rollout rank
    of each pipeline as its policy maps it (the executor starts every rank's worker, asleep, up
    front; under `static` a pipeline's ranks are its home's bundles only)."""
    return workers_by_kind(data)[0]


def workers_by_kind(data: Mapping[str, Any]) -> tuple[int, int]:
    """`workers_started`, and how many of them are multi-LoRA pipelines' (theirs also load the
    adapter library as they start)."""
    import yaml

    from rlix.policy.specs import PipelineKind
    from rlix.scenarios import parse_scenario

    specs = parse_scenario(yaml.safe_dump(dict(data))).pipeline_specs().values()
    return (sum(spec.rollout.num_ranks for spec in specs),
            sum(spec.rollout.num_ranks for spec in specs if spec.kind is PipelineKind.MULTI_LORA))


def multi_lora_ids(data: Mapping[str, Any]) -> set[str]:
    """The ids of the multi-LoRA pipelines of scenario `data` (plain data)."""
    return {str(p["id"]) for p in data["pipelines"] if p.get("kind") == "multi_lora"}


def steps_trained(data: Mapping[str, Any]) -> int:
    """Steps the run trains: each pipeline's, each adapter's for multi-LoRA."""
    total = 0
    for pipeline in data["pipelines"]:
        adapters = pipeline.get("adapters") or []
        if adapters:
            total += sum(int(a.get("steps", pipeline["steps"])) for a in adapters)
        else:
            total += int(pipeline["steps"])
    return total


def run_sample(run_dir: Path, data: Mapping[str, Any]) -> dict[str, float]:
    """What a live run folder says of its CPU work, with the steps and workers of its scenario."""
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    machine = summary.get("machine") or {}
    missing = [k for k in ("own_cpu_s", "own_cores", "machine_busy_share", "wall_s") if k not in machine]
    if missing:
        raise ValueError(f"{run_dir}: summary.json machine lacks {', '.join(missing)} (a run recorded before the "
                         "meter counted CPU work, or not on Linux)")
    starts = machine.get("worker_start_cpu_s")
    sample = {"own_cpu_s": float(machine["own_cpu_s"]), "own_cores": float(machine["own_cores"]),
              "busy_share": float(machine["machine_busy_share"]),
              "lead_s": float(machine["wall_s"]) - float(summary["makespan_s"]),
              "steps": float(steps_trained(data)),
              # Each worker's own reading says the run started these (a replaced worker too);
              # without readings, those its scenario maps.
              "workers": float(len(starts) if starts else workers_started(data))}
    if starts:
        sample["worker_start_cpu_s"] = float(sum(starts))
        lora = _lora_starts(machine.get("worker_starts") or [], multi_lora_ids(data))
        if lora is not None:
            sample["workers_multi_lora"] = float(len(lora))
            sample["worker_start_cpu_multi_lora_s"] = float(sum(lora))
    accounts = machine.get("worker_cpu")
    if starts and accounts:  # and where the rest of their CPU went, by the end
        sample["moves_cpu_s"] = float(sum(a["moves_s"] for a in accounts))
        sample["loads"] = float(sum(a["wakes"] for a in accounts))
        sample["idle_cpu_s"] = float(sum(max(0.0, a["total_s"] - a["start_s"] - a["moves_s"] - a["generate_s"])
                                         for a in accounts))
        sample["alive_s"] = float(sum(a["alive_s"] for a in accounts))
    return sample


def _lora_starts(starts: Sequence[Mapping[str, Any]], lora_ids: set[str]) -> list[float] | None:
    """The CPU seconds of the starts of multi-LoRA pipelines' workers, from the workers' own
    readings (None when a reading does not say whose it is)."""
    if not starts or any("pipeline_id" not in start for start in starts):
        return None
    return [float(start["cpu_s"]) for start in starts if str(start["pipeline_id"]) in lora_ids]


def fit_cpu_work(samples: Sequence[Mapping[str, float]]) -> dict[str, Any]:
    """own_cpu_s = cpu_per_step_s * steps + cpu_per_worker_s * workers (+ loads and idle workers,
    when measured) over the runs, all non-negative. When every run has its workers' own readings (`worker_start_cpu_s`, `source`
    "measured") the per-worker CPU is their mean and the per-step CPU what is left, from one run
    or more; else both are fitted by least squares (`source` "fitted"), which needs runs that
    differ in workers per step. `fitted` is false (with a reason) when the runs were not bound
    by CPU, or cannot tell the two parts apart."""
    result: dict[str, Any] = {"fitted": False, "runs": [dict(s) for s in samples]}
    if not samples:
        result["reason"] = "no runs"
        return result
    if min(s["busy_share"] for s in samples) < MIN_BUSY_SHARE:
        result["reason"] = f"a run's machine was less than {MIN_BUSY_SHARE:.0%} busy: not bound by CPU work"
        return result
    if all("worker_start_cpu_s" in s for s in samples):
        result.update(_measured(samples))
        return result
    ratios = {round(s["workers"] / s["steps"], 9) for s in samples}
    if len(ratios) < 2:
        result["reason"] = "needs runs that start different numbers of workers per step"
        return result
    x = np.array([[s["steps"], s["workers"]] for s in samples], float)
    coef, rms = nonnegative_lstsq(x, np.array([s["own_cpu_s"] for s in samples], float))
    result.update(fitted=True, source="fitted", cpu_per_step_s=float(coef[0]), cpu_per_worker_s=float(coef[1]),
                  **_machine(samples), rms_cpu_s=rms)
    return result


def _measured(samples: Sequence[Mapping[str, float]]) -> dict[str, Any]:
    """The fit from the workers' own readings: their starts give the per-worker CPU; with their
    accounts, their weight moves the per-load CPU and their idle CPU over the time they were up
    the cores an idle worker takes; the per-step CPU is what is left. One run is enough."""
    per_worker, per_lora_worker = _per_worker(samples)
    accounted = all("idle_cpu_s" in s for s in samples)
    loads = sum(s["loads"] for s in samples) if accounted else 0.0
    per_load = sum(s["moves_cpu_s"] for s in samples) / loads if accounted and loads else 0.0
    alive = sum(s["alive_s"] for s in samples) if accounted else 0.0
    idle_cores = sum(s["idle_cpu_s"] for s in samples) / alive if accounted and alive else 0.0

    def rest(s: Mapping[str, float]) -> float:
        spent = s["worker_start_cpu_s"]
        if accounted:
            spent += s["moves_cpu_s"] + s["idle_cpu_s"]
        return s["own_cpu_s"] - spent

    per_step = max(0.0, sum(rest(s) for s in samples) / sum(s["steps"] for s in samples))
    residual = np.array([rest(s) - per_step * s["steps"] for s in samples])
    return {"fitted": True, "source": "measured" if accounted else "measured starts", "cpu_per_step_s": per_step,
            "cpu_per_worker_s": per_worker, **per_lora_worker, "cpu_per_load_s": per_load, "idle_cores_per_worker": idle_cores,
            **_machine(samples), "rms_cpu_s": float(np.sqrt(np.mean(residual**2)))}


def _per_worker(samples: Sequence[Mapping[str, float]]) -> tuple[float, dict[str, float]]:
    """The CPU a worker's start takes: a full-finetune pipeline's worker (every worker's, when
    the runs did not start both kinds) and, when they did, a multi-LoRA one's
    (`cpu_per_worker_multi_lora_s`: it loads the adapter library too)."""
    workers = sum(s["workers"] for s in samples)
    start_s = sum(s["worker_start_cpu_s"] for s in samples)
    if not all("workers_multi_lora" in s for s in samples):
        return start_s / workers, {}
    lora = sum(s["workers_multi_lora"] for s in samples)
    if lora == 0 or lora == workers:
        return start_s / workers, {}
    lora_s = sum(s["worker_start_cpu_multi_lora_s"] for s in samples)
    return (start_s - lora_s) / (workers - lora), {"cpu_per_worker_multi_lora_s": lora_s / lora}


def _machine(samples: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The cores the runs got and the driver's lead before the first arrival, averaged."""
    return {"cores": float(np.mean([s["own_cores"] for s in samples])),
            "lead_s": float(np.mean([s["lead_s"] for s in samples]))}


def write_fit(path: Path, runs: Sequence[Path], configs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The fit of the runs whose configs are known (`configs` in the runs' order; a run past
    them, given as a folder, is left out), written to `path` as JSON (its `reason` says why
    not, when it was not fitted)."""
    try:
        fit = fit_cpu_work([run_sample(run, config) for run, config in zip(runs, configs, strict=False)])
    except ValueError as exc:
        fit = {"fitted": False, "reason": str(exc)}
    Path(path).write_text(json.dumps(fit, indent=1))
    return fit


def cpu_bound_makespan_s(fit: Mapping[str, Any], data: Mapping[str, Any], loads: float = 0.0) -> float:
    """The makespan a CPU-bound live run of `data` making `loads` weight loads (the simulator's
    count) is predicted to take: its CPU work over the cores the calibration runs got, less the
    driver's lead before the first arrival. The workers' idle CPU grows with the run itself, so
    it comes off the cores: wall = work / (cores - idle cores per worker * workers)."""
    workers, lora = workers_by_kind(data)
    if "cpu_per_worker_multi_lora_s" not in fit:
        lora = 0
    work = (fit["cpu_per_step_s"] * steps_trained(data) + fit["cpu_per_worker_s"] * (workers - lora)
            + fit.get("cpu_per_worker_multi_lora_s", 0.0) * lora + fit.get("cpu_per_load_s", 0.0) * loads)
    # Never below a tenth of the cores: a fit from a run with few workers read far beyond it.
    cores = max(fit["cores"] - fit.get("idle_cores_per_worker", 0.0) * workers, 0.1 * fit["cores"])
    return float(max(0.0, work / cores - fit["lead_s"]))
