"""Contention across configs: how a run's per-operation speed depends on how much of it works at once.

On the CPU executor the declared GPUs share a few cores, so a config in which less of the run
works at once (fewer GPUs, the static policy) runs each operation faster. The within-run fit
(rlix.sim.contention) cannot see it: a run's concurrency hardly varies within the run. Here it
is fitted across runs:

- `run_concurrency(activity)`: a run's concurrency C, the time-weighted mean number of spans of
  work running at once (the spans rlix.sim.contention counts: one per holder, init left out),
  over the time at least one runs. Both drivers write `activity`, so it reads a live folder and
  a simulator folder alike.
- `op_speeds(activity)`: the run's per-operation speed, the median duration of each kind of span
  (load, offload, rollout call, log-prob pass, training, sync).
- `fit_concurrency(runs)`: over runs of the same workload at different C, the per-op slowdown
  f(C) relative to the first run (the reference, f(C_ref) = 1), in two forms, fitted on the log
  of the medians (each kind its own base; relative residuals):

      linear      f(C) = 1 + s * (C - C_ref)            (s >= 0)
      fair share  f(C) = max(1, C / k) / max(1, C_ref / k)   (k: effective cores)

  and the one with the smaller residual is chosen (the linear on a tie: with two runs both
  forms fit the mean ratio; they differ only beyond the runs' range).
- `costs_at(costs_file, C)`: the constants of the operations that share the cores (decode,
  prefill, stages, weight moves, publish, checkpoint; not start-up, modelled per pipeline
  started together) rescaled by f(C) / f(C_ref): the constants at another config's concurrency.
  The simulator's prediction of that concurrency comes from a first run on the reference
  constants (rlix.studies.fidelity.predict_with_concurrency iterates to a fixed point).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from rlix.sim import contention

if TYPE_CHECKING:
    from rlix.scenarios.costs import CostsFile

#: The constants of operations that share the cores while the run works: rescaled by f(C).
#: Start-up (launch, init, worker start) is left as fitted: it is modelled apart (fixed, or per
#: pipeline started together: rlix.sim.stages.startup_places) and its spans are not in C.
SCALED = (
    "decode_iteration_s", "decode_per_sequence_s", "prefill_per_token_s",
    "forward_fixed_s", "forward_per_token_s", "train_fixed_s", "train_per_token_s",
    "load_s", "offload_s", "expand_overhead_s", "shrink_overhead_s",
    "publish_full_s", "publish_adapter_s", "checkpoint_full_s", "checkpoint_adapter_s",
)
#: A kind of span counts toward a run's speed when every run has at least this many of it.
MIN_SPANS = 3
#: Runs whose concurrencies span less than this cannot tell a slope (the fit is not made).
MIN_SPREAD = 0.1
_SLOPES = np.linspace(0.0, 3.0, 6001)
_CORES = np.linspace(0.25, 8.0, 3101)


def work_spans(activity: pd.DataFrame) -> pd.DataFrame:
    """The ended spans of work of an activity table (rlix.sim.contention.work_spans: one per
    holder, init left out); columns stage, t_start, t_end."""
    spans = contention.work_spans(activity)
    spans = spans[np.isfinite(spans["t_end"].to_numpy(float))]
    return spans[["stage", "t_start", "t_end"]].reset_index(drop=True)


def run_concurrency(activity: pd.DataFrame) -> float:
    """Time-weighted mean number of spans of work running at once, over the time at least one
    runs (0.0 when there is none)."""
    spans = work_spans(activity)
    starts, ends = spans["t_start"].to_numpy(float), spans["t_end"].to_numpy(float)
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return 0.0
    times = np.concatenate([starts, ends])
    deltas = np.concatenate([np.ones(len(starts)), -np.ones(len(ends))])
    order = np.lexsort((deltas, times))  # at a tie an end goes first: touching spans do not overlap
    times, running = times[order], np.cumsum(deltas[order])[:-1]
    widths = np.diff(times)
    busy = float(widths[running > 0].sum())
    return float((running * widths).sum() / busy) if busy > 0 else 0.0


def op_speeds(activity: pd.DataFrame) -> dict[str, tuple[float, int]]:
    """Each kind of span's median duration (s) and count."""
    spans = work_spans(activity)
    spans = spans.assign(duration=spans["t_end"] - spans["t_start"])
    spans = spans[spans["duration"] > 0]
    grouped = spans.groupby("stage")["duration"].agg(["median", "count"])
    return {str(kind): (float(median), int(count))
            for kind, median, count in zip(grouped.index, grouped["median"], grouped["count"], strict=True)}


def linear_factor(slope: float, reference: float, concurrency: Any) -> Any:
    """1 + slope * (C - C_ref), for one concurrency or an array of them."""
    return 1.0 + slope * (concurrency - reference)


def fair_share_factor(cores: float, reference: float, concurrency: float) -> float:
    return max(1.0, concurrency / cores) / max(1.0, reference / cores)


def factor(fit: Mapping[str, Any], concurrency: float) -> float:
    """f(concurrency) / f(reference) of a `fit_concurrency` result (1.0 when it was not fitted),
    the concurrency held to the range the calibration runs spanned: beyond it the line is
    not measured, and a prediction that runs faster works less at once, which runs it faster
    still (a fixed point that ran away from 1.75 to 1.0 in a bench, docs/calibration.md)."""
    if not fit.get("fitted"):
        return 1.0
    seen = [run["concurrency"] for run in fit.get("runs", [])]
    if seen:
        concurrency = min(max(concurrency, min(seen)), max(seen))
    if fit["form"] == "fair_share":
        return fair_share_factor(fit["effective_cores"], fit["reference_concurrency"], concurrency)
    return max(0.05, float(linear_factor(fit["slope"], fit["reference_concurrency"], concurrency)))


def fit_concurrency(runs: Sequence[tuple[str, pd.DataFrame]],
                    concurrencies: Sequence[float] | None = None) -> dict[str, Any]:
    """The per-op slowdown against run concurrency over `runs` ((name, activity) each; the
    first is the reference). Always records each run's concurrency and speeds; `fitted` says
    whether a slowdown was fitted (at least two runs whose concurrencies differ by MIN_SPREAD).
    `concurrencies` (one per run) replace the runs' own: the simulator's replays of their
    configs, say, to set the speeds against concurrency as the simulator counts it."""
    if concurrencies is None:
        concurrencies = [run_concurrency(activity) for _, activity in runs]
    concurrencies = [float(c) for c in concurrencies]
    speeds = [op_speeds(activity) for _, activity in runs]
    reference = concurrencies[0] if concurrencies else 0.0
    result: dict[str, Any] = {
        "fitted": False, "reference_concurrency": reference,
        "runs": [{"run": name, "concurrency": c, "median_s": {k: v[0] for k, v in s.items()}}
                 for (name, _), c, s in zip(runs, concurrencies, speeds, strict=True)],
    }
    kinds = sorted(k for k in (set.intersection(*(set(s) for s in speeds)) if speeds else set())
                   if all(s[k][1] >= MIN_SPANS for s in speeds))
    if len(runs) < 2 or np.ptp(concurrencies) < MIN_SPREAD or not kinds:
        result["reason"] = ("needs runs of at least two concurrencies (differing by "
                            f"{MIN_SPREAD}) with spans of a kind in common")
        return result
    c = np.asarray(concurrencies, float)
    logs = np.log(np.array([[s[k][0] for k in kinds] for s in speeds]))  # runs x kinds

    def residual(log_factor: np.ndarray) -> float:
        base = (logs - log_factor[:, None]).mean(axis=0)  # each kind's base, closed form
        return float(np.sqrt(np.mean((logs - log_factor[:, None] - base) ** 2)))

    linear = min((residual(np.log(np.maximum(0.05, linear_factor(s, reference, c)))), float(s)) for s in _SLOPES)
    fair = min((residual(np.log([fair_share_factor(k, reference, x) for x in c])), float(k)) for k in _CORES)
    flat = residual(np.zeros(len(c)))
    form = "fair_share" if fair[0] < linear[0] - 1e-9 else "linear"
    result.update(
        fitted=True, form=form, slope=linear[1], effective_cores=fair[1], kinds=kinds,
        relative_rms_linear=linear[0], relative_rms_fair_share=fair[0], relative_rms_flat=flat, scaled=list(SCALED),
    )
    for run, x in zip(result["runs"], c, strict=True):
        run["factor"] = factor(result, float(x))
    return result


def costs_at(costs: CostsFile, concurrency: float) -> dict[str, float]:
    """The cost file's constants at a run concurrency of `concurrency`: those of SCALED times
    f(concurrency) / f(reference). Unchanged when the file has no fitted slowdown (an old file,
    or one calibrated on one concurrency)."""
    fit = costs.concurrency
    ratio = factor(fit, concurrency)
    return {name: value * ratio if name in SCALED else value for name, value in costs.costs.items()}


def reference_costs(per_run: Sequence[Mapping[str, tuple[float, int]]], pooled: Mapping[str, float],
                    fit: Mapping[str, Any]) -> dict[str, float]:
    """The constants at the reference concurrency: each SCALED one the sample-weighted mean of
    the runs' own fits (`per_run`: name -> (value, samples)) each divided by its run's factor;
    the rest (start-up) as the pooled fit has them."""
    out = dict(pooled)
    if not fit.get("fitted"):
        return out
    factors = [run["factor"] for run in fit["runs"]]
    for name in SCALED:
        if name not in out:
            continue
        pairs = [(values[name][0] / f, values[name][1]) for values, f in zip(per_run, factors, strict=True)
                 if name in values]
        weight = sum(samples for _, samples in pairs)
        if weight > 0:
            out[name] = sum(value * samples for value, samples in pairs) / weight
    return out
