"""Fitting the simulator's measured cost constants from run folders (`rlix-sim calibrate`).

The fit reads only the tables both drivers write (rlix.runs), so the same code reads a live
executor run (its purpose) and a simulator run (to check that it recovers the constants the
simulator ran with). What each constant is fitted from:

- decode: rollout attempts grouped into engine calls (same pipeline, rank, start and end);
  a call of b trajectories that generated n tokens at most and prefilled P prompt and
  recomputed tokens takes n * decode_iteration_s + n * b * decode_per_sequence_s +
  P * prefill_per_token_s (least squares over calls in which every attempt completed);
- gang stages: each step's `<stage>_s` column against the tokens of its batch (prompt and
  response of its completed trajectories): fixed + per token, forward passes (old and
  reference log-probs, values) and training (actor, critic) apart;
- weight moves: the `activity` table's load and offload spans of rollout ranks (the loading
  share a run reports), and on top the driver's overhead: each Expand and Shrink from its
  decision to its applied report in the event log (rlix.sim.calibrate_events) less the span;
- publish and checkpoint: the steps' `sync_s` and `checkpoint_s`, full models and adapters apart;
- start-up: from a pipeline's arrival to its first request (`waits`, priority 0: a live
  driver actor starting), its trainer's init (the init busy span in `activity`), and the rest
  of its init holding (priority 0 in `allocations`): its rollout ranks' workers starting one
  after another, worker_start_s each; launch and init against the pipelines started together
  (rlix.sim.stages.startup_places), fixed when one count was seen.

Every fit (rlix.sim.calibrate_fits) is least squares (numpy) with non-negative constants, each
constant with the root-mean-square residual of its fit, in seconds.

Contention (rlix.sim.contention) is fitted here too, from the activity table, and reported.
Across runs of different concurrency (rlix.sim.concurrency) the per-op slowdown is fitted, and
the constants of the operations that share the cores are then each run's own fit brought to
the first run's concurrency (the reference) and averaged; with one concurrency seen, the pooled
fit as before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rlix.runs.errors import RunError
from rlix.runs.folder import SUMMARY_FILE
from rlix.runs.paths import is_simulator_summary
from rlix.runs.reader import load
from rlix.scenarios.costs import ConstantFit, CostsFile
from rlix.sim.calibrate_events import decision_spans, driver_overhead
from rlix.sim.calibrate_fits import (
    Fit,
    RunData,
    fit_decode,
    fit_init,
    fit_publish,
    fit_stages,
    fit_weight_moves,
    fit_worker_start,
)
from rlix.sim.concurrency import fit_concurrency, reference_costs
from rlix.sim.contention import fit_contention
from rlix.traces.tables import read_table


@dataclass
class Calibration:
    """What `fit_runs` found: the constants, and the contention fit (reported)."""

    fits: list[Fit]
    contention: dict[str, Any] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)
    #: The driver's own overhead between a decision and its effect (reported).
    driver: dict[str, Any] = field(default_factory=dict)
    #: How busy the machine was besides the runs (their summary.json `machine`, averaged).
    machine: dict[str, float] = field(default_factory=dict)
    #: Per-op slowdown against run concurrency across the runs (rlix.sim.concurrency).
    concurrency: dict[str, Any] = field(default_factory=dict)

    @property
    def costs(self) -> dict[str, float]:
        return {f.name: f.value for f in self.fits}

    def costs_file(self) -> CostsFile:
        return CostsFile(
            calibrated_from=self.runs, costs=self.costs,
            fits={f.name: ConstantFit(value=f.value, residual_s=f.residual_s, samples=f.samples) for f in self.fits},
            contention=self.contention, driver=self.driver, machine=self.machine, concurrency=self.concurrency,
        )


def read_run(path: str | Path, accept_simulated: bool = False) -> RunData:
    """A run folder's tables, or RunError (one line) naming what it lacks."""
    run = load(path)
    simulated = is_simulator_summary(run.summary)
    if simulated and not accept_simulated:
        raise RunError("a simulator run: calibrate fits live executor runs (rlix-exec run ... --out DIR)", file=run.path)
    try:
        steps, activity = run.steps, run.activity
        rollouts, allocations = run.rollouts, run.allocations
    except Exception as error:  # noqa: BLE001 - a missing or broken table: one line naming it
        raise RunError(f"cannot read its tables ({' '.join(str(error).split())})", file=run.path) from None
    steps = steps[np.isfinite(steps["t_end"].to_numpy(float)) & (steps["step"] >= 0)]
    problems = [what for what, empty in (
        ("finished steps", steps.empty), ("rollout attempts", rollouts.empty),
        ("weight loads and offloads in activity", not activity["stage"].isin(["load", "offload"]).any()),
        ("init holding in allocations", not (allocations["priority"] == 0).any()),
    ) if empty]
    if problems:
        raise RunError(f"nothing to fit: no {', no '.join(problems)}", file=run.path)
    check_machine(run.summary.get("machine", {}), run.path)
    return RunData(run.path, run, steps, activity, rollouts, allocations, simulated, decision_spans(run))


#: summary.json `machine` numbers machine_load reads: those a record with cores must have, then the others.
_MACHINE_NEEDED = ("cores", "own_demand", "background_demand")
_MACHINE_OPTIONAL = ("own_demand_running", "own_cores", "machine_busy_share")


def check_machine(machine: dict[str, Any], path: Path) -> None:
    """RunError unless a `machine` record that gives cores holds what machine_load averages
    and the report prints: finite numbers >= 0 (cores > 0), CPU seconds by role a mapping of
    them. A record without cores is not used. The reader checks only that it is an object."""
    if not machine.get("cores"):
        return
    where, file = "machine", Path(path) / SUMMARY_FILE
    for key in (*_MACHINE_NEEDED, *_MACHINE_OPTIONAL):
        if key not in machine:
            if key in _MACHINE_NEEDED:
                raise RunError(f"{where}.{key}: missing (a record with cores says {', '.join(_MACHINE_NEEDED)})",
                               file=file)
            continue
        value = machine[key]
        if not _is_count(value) or (key == "cores" and value <= 0):
            raise RunError(f"{where}.{key}={value!r}: not a finite number >= 0{' (> 0 for cores)' * (key == 'cores')}",
                           file=file)
    roles = machine.get("own_cpu_by_role_s")
    if roles is not None and not (isinstance(roles, dict) and all(_is_count(v) for v in roles.values())):
        raise RunError(f"{where}.own_cpu_by_role_s={roles!r}: not CPU seconds by role", file=file)


def _is_count(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def fit_runs(paths: Sequence[str | Path], accept_simulated: bool = False) -> Calibration:
    """Fit every constant from the run folders `paths` (each checked first, each once)."""
    if not paths:
        raise RunError("no run folder given")
    seen: dict[Path, str | Path] = {}
    for path in paths:  # a folder given twice would count its measurements twice
        resolved = Path(path).resolve()
        if resolved in seen:
            raise RunError(f"given twice (also as {seen[resolved]})", file=path)
        seen[resolved] = path
    data = [read_run(p, accept_simulated) for p in paths]
    fits = fit_constants(data)
    concurrency = fit_concurrency([(str(d.path), d.activity) for d in data])
    if concurrency["fitted"]:
        per_run = [{f.name: (f.value, f.samples) for f in fit_constants([d])} for d in data]
        at_reference = reference_costs(per_run, {f.name: f.value for f in fits}, concurrency)
        fits = [Fit(f.name, at_reference[f.name], f.residual_s, f.samples) for f in fits]
    driver = driver_overhead(pd.concat([d.spans for d in data], ignore_index=True))
    return Calibration(fits, fit_contention([d.activity for d in data]), [str(d.path) for d in data], driver,
                       machine_load(data), concurrency)


def fit_constants(data: Sequence[RunData]) -> list[Fit]:
    """Every constant fitted over `data` pooled."""
    fits = [*fit_decode(data), *fit_stages(data), *fit_weight_moves(data), *fit_publish(data), *fit_init(data)]
    return fits + fit_worker_start(data)


def machine_load(data: Sequence[RunData]) -> dict[str, float]:
    """The runs' cores and CPU demand, their own (while they run) and the rest's (summary.json
    `machine`, rlix.executor.machine), averaged, with the cores they used and how busy the
    machine was when every run says; {} if no run says."""
    said = [d.run.summary["machine"] for d in data if d.run.summary.get("machine", {}).get("cores")]
    if not said:
        return {}
    load = {"cores": float(said[0]["cores"]),
            "own_demand": float(np.mean([m.get("own_demand_running", m["own_demand"]) for m in said])),
            "background_demand": float(np.mean([m["background_demand"] for m in said]))}
    for key in ("own_cores", "machine_busy_share"):  # what the CPU did (runs recorded since the meter counted it)
        if all(key in m for m in said):
            load[key] = float(np.mean([m[key] for m in said]))
    return load


def slowdown(machine: dict[str, float], background_demand: float) -> float:
    """How much slower than alone on an idle machine a run goes beside other work wanting
    `background_demand` cores: under fair sharing, max(1, (own + background) / cores)."""
    return max(1.0, (machine["own_demand"] + background_demand) / machine["cores"])


def costs_for_background(costs: CostsFile, background_demand: float) -> dict[str, float]:
    """The constants rescaled to a machine where other work wants `background_demand` cores
    (rlix.executor.machine.probe_background): every time by slowdown(now) / slowdown(then).
    Unchanged when the file does not say how busy its machine was."""
    if not costs.machine:
        return dict(costs.costs)
    factor = slowdown(costs.machine, background_demand) / slowdown(costs.machine, costs.machine["background_demand"])
    return {name: value * factor for name, value in costs.costs.items()}


def write_trace(paths: Sequence[str | Path], out: str | Path) -> Path:
    """The runs' completed rollouts as a trace (prompt and response lengths, by pipeline,
    adapter and step): what the simulator replays to predict runs of the same workload."""
    from rlix.traces.io import write_trace as write

    parts = []
    for path in paths:
        done = read_table(Path(path), "rollouts")
        done = done[(done["status"] == "completed") & (done["response_tokens"] > 0) & (done["prompt_tokens"] > 0)]
        parts.append(pd.DataFrame({
            "pipeline": done["pipeline_id"].astype(str), "adapter": done["adapter"].astype(str),
            "step": done["step_consumed"].astype("int64"),
            "response_tokens": done["response_tokens"].astype("int64"),
            "prompt_tokens": done["prompt_tokens"].astype("int64"),
        }))
    frame = pd.concat(parts, ignore_index=True)
    if frame.empty:
        raise RunError("no completed rollout to write as a trace", file=Path(paths[0]))
    return write(frame, out)
