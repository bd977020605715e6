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
  decision to its applied report in the event log (rlix.sim.calibrate_events) less the span.
  A rank's first load that waited for its worker process to start tells when that worker came
  up (worker_start_per_pipeline_s; see CostModel.worker_ready_s);
- publish and checkpoint: the steps' `sync_s` and `checkpoint_s`, full models and adapters apart;
- start-up: from a pipeline's arrival to its first request (`waits`, priority 0: a live
  driver actor starting) and its init holding (priority 0 in `allocations`: its trainer
  starting), each against the pipelines started together (rlix.sim.stages.startup_pipelines):
  start-ups share a machine's cores, so with one count seen they are all per pipeline.

Every fit is least squares (numpy) with non-negative constants: a negative slope is set to 0
and the intercept refitted, a slope whose regressor does not vary is 0 (the data cannot tell
it). Each constant comes with the root-mean-square residual of its fit, in seconds.

Contention (rlix.sim.contention) is fitted here too, from the activity table, and reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rlix.policy.specs import ROLLOUT_CLUSTER, PipelineKind
from rlix.runs.errors import RunError
from rlix.runs.reader import Run, load
from rlix.scenarios.costs import ConstantFit, CostsFile
from rlix.sim.calibrate_events import decision_spans, driver_overhead
from rlix.sim.contention import fit_contention
from rlix.sim.stages import startup_pipelines
from rlix.traces.tables import read_table

#: Step-table columns of forward passes and of training steps.
FORWARD_COLUMNS = ("old_log_probs_s", "ref_log_probs_s", "values_s")
TRAIN_COLUMNS = ("actor_train_s", "critic_train_s")


@dataclass(frozen=True)
class Fit:
    """One fitted constant (see ConstantFit)."""

    name: str
    value: float
    residual_s: float
    samples: int


@dataclass
class Calibration:
    """What `fit_runs` found: the constants, and the contention fit (reported)."""

    fits: list[Fit]
    contention: dict[str, Any] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)
    #: The driver's own overhead between a decision and its effect (reported).
    driver: dict[str, Any] = field(default_factory=dict)

    @property
    def costs(self) -> dict[str, float]:
        return {f.name: f.value for f in self.fits}

    def costs_file(self) -> CostsFile:
        return CostsFile(
            calibrated_from=self.runs, costs=self.costs,
            fits={f.name: ConstantFit(value=f.value, residual_s=f.residual_s, samples=f.samples) for f in self.fits},
            contention=self.contention, driver=self.driver,
        )


@dataclass
class RunData:
    """The tables of one run folder the fits read, checked."""

    path: Path
    run: Run
    steps: pd.DataFrame
    activity: pd.DataFrame
    rollouts: pd.DataFrame
    allocations: pd.DataFrame
    simulated: bool
    #: Decisions carried out, from decision to applied (rlix.sim.calibrate_events).
    spans: pd.DataFrame


def read_run(path: str | Path, accept_simulated: bool = False) -> RunData:
    """A run folder's tables, or RunError (one line) naming what it lacks."""
    run = load(path)
    simulated = "unfinished" in run.summary  # only the simulator's summary says which did not finish
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
        ("an init holding in allocations", not (allocations["priority"] == 0).any()),
    ) if empty]
    if problems:
        raise RunError(f"nothing to fit: no {', no '.join(problems)}", file=run.path)
    return RunData(run.path, run, steps, activity, rollouts, allocations, simulated, decision_spans(run))


def fit_runs(paths: Sequence[str | Path], accept_simulated: bool = False) -> Calibration:
    """Fit every constant from the run folders `paths` (each checked first)."""
    if not paths:
        raise RunError("no run folder given")
    data = [read_run(p, accept_simulated) for p in paths]
    fits = [*fit_decode(data), *fit_stages(data), *fit_weight_moves(data), *fit_publish(data), *fit_init(data)]
    found = {f.name: f.value for f in fits}
    fits += fit_worker_start(data, found.get("load_s", 0.0) + found.get("expand_overhead_s", 0.0))
    driver = driver_overhead(pd.concat([d.spans for d in data], ignore_index=True))
    return Calibration(fits, fit_contention([d.activity for d in data]), [str(d.path) for d in data], driver)


# --- least squares ----------------------------------------------------------------------------


def nonnegative_lstsq(features: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, float]:
    """Least squares with every coefficient >= 0 and constant columns' slopes left out (0):
    drop the most negative coefficient and refit until none is. Returns (coefficients, rms)."""
    n, k = features.shape
    keep = [j for j in range(k) if j == 0 or np.ptp(features[:, j]) > 1e-9 * max(1.0, np.abs(features[:, j]).max())]
    coef = np.zeros(k)
    while keep:
        solution, *_ = np.linalg.lstsq(features[:, keep], target, rcond=None)
        if (solution >= 0).all():
            coef[keep] = solution
            break
        keep.pop(int(np.argmin(solution)))
    residual = target - features @ coef
    return coef, float(np.sqrt(np.mean(residual**2))) if n else 0.0


def _linear_fits(names: Sequence[str], features: np.ndarray, target: np.ndarray) -> list[Fit]:
    coef, rms = nonnegative_lstsq(features, target)
    return [Fit(name, float(c), rms, len(target)) for name, c in zip(names, coef, strict=True)]


# --- decode -----------------------------------------------------------------------------------


def engine_calls(rollouts: pd.DataFrame) -> pd.DataFrame:
    """Attempts grouped into engine calls in which every attempt completed: duration_s,
    sequences, iterations (most tokens generated by one attempt), prefill_tokens."""
    frame = rollouts.assign(
        generated=rollouts["response_tokens"] - rollouts["recomputed_tokens"],
        prefill=rollouts["prompt_tokens"] + rollouts["recomputed_tokens"],
        done=rollouts["status"] == "completed",
    )
    frame = frame[frame["t_end"] > frame["t_start"]]
    calls = frame.groupby(["pipeline_id", "dp_rank", "t_start", "t_end"], observed=True).agg(
        sequences=("done", "size"), all_done=("done", "all"), iterations=("generated", "max"),
        prefill_tokens=("prefill", "sum"),
    ).reset_index()
    calls = calls[calls["all_done"] & (calls["iterations"] > 0)]
    return calls.assign(duration_s=calls["t_end"] - calls["t_start"])


def fit_decode(data: Sequence[RunData]) -> list[Fit]:
    calls = pd.concat([engine_calls(d.rollouts) for d in data], ignore_index=True)
    if calls.empty:
        raise RunError("nothing to fit: no engine call in which every attempt completed", file=data[0].path)
    n = calls["iterations"].to_numpy(float)
    features = np.column_stack([n, n * calls["sequences"].to_numpy(float), calls["prefill_tokens"].to_numpy(float)])
    return _linear_fits(("decode_iteration_s", "decode_per_sequence_s", "prefill_per_token_s"),
                        features, calls["duration_s"].to_numpy(float))


# --- gang stages, publish, checkpoint ---------------------------------------------------------


def batch_tokens(rollouts: pd.DataFrame) -> pd.Series:
    """Tokens (prompt and response) of each batch's completed trajectories, by (pipeline_id,
    adapter, step), as the simulator charges a stage."""
    done = rollouts[rollouts["status"] == "completed"]
    tokens = done["prompt_tokens"] + done["response_tokens"]
    return tokens.groupby([done["pipeline_id"], done["adapter"], done["step_consumed"]], observed=True).sum()


def _stage_samples(data: Sequence[RunData], columns: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    durations, tokens = [], []
    for d in data:
        by_batch = batch_tokens(d.rollouts)
        keys = pd.MultiIndex.from_frame(d.steps[["pipeline_id", "adapter", "step"]])
        step_tokens = by_batch.reindex(keys).to_numpy(float)
        for column in columns:
            if column not in d.steps:
                continue
            values = d.steps[column].to_numpy(float)
            ok = (values > 0) & np.isfinite(step_tokens)
            durations.append(values[ok])
            tokens.append(step_tokens[ok])
    if not durations:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(durations), np.concatenate(tokens)


def fit_stages(data: Sequence[RunData]) -> list[Fit]:
    fits = []
    for prefix, columns in (("forward", FORWARD_COLUMNS), ("train", TRAIN_COLUMNS)):
        durations, tokens = _stage_samples(data, columns)
        if len(durations):
            fits += _linear_fits((f"{prefix}_fixed_s", f"{prefix}_per_token_s"),
                                 np.column_stack([np.ones(len(tokens)), tokens]), durations)
    return fits


def _mean_fit(name: str, values: np.ndarray) -> list[Fit]:
    if not len(values):
        return []
    mean = float(values.mean())
    return [Fit(name, mean, float(np.sqrt(np.mean((values - mean) ** 2))), len(values))]


def _by_kind(d: RunData) -> pd.Series:
    """Whether each step row is of a full-finetune pipeline (else an adapter's)."""
    full = {pid: spec.kind is PipelineKind.FULL_FINETUNE for pid, spec in d.run.specs.items()}
    return d.steps["pipeline_id"].map(full).fillna(True).astype(bool)


def fit_publish(data: Sequence[RunData]) -> list[Fit]:
    fits = []
    for column, name in (("sync_s", "publish"), ("checkpoint_s", "checkpoint")):
        for full, kind in ((True, "full"), (False, "adapter")):
            parts = []
            for d in data:
                rows = d.steps[_by_kind(d) == full]
                values = rows[column].to_numpy(float) if column in rows else np.zeros(0)
                # A checkpoint is written every few steps only: the others are 0.
                parts.append(values[values > 0] if column == "checkpoint_s" else values)
            fits += _mean_fit(f"{name}_{kind}_s", np.concatenate(parts))
    return fits


# --- weight moves and start-up ----------------------------------------------------------------


def weight_moves(activity: pd.DataFrame) -> pd.DataFrame:
    """One row per load or offload span of a rollout rank in `activity` (a rank's GPUs share
    one): stage, duration_s, first (the rank's first load)."""
    moves = activity[(activity["cluster"] == ROLLOUT_CLUSTER) & activity["stage"].isin(["load", "offload"])]
    moves = moves[moves["dp_rank"] >= 0].drop_duplicates(["pipeline_id", "dp_rank", "stage", "t_start"])
    moves = moves.sort_values("t_start", kind="stable")
    first = ~moves.duplicated(["pipeline_id", "dp_rank", "stage"]) & (moves["stage"] == "load")
    return moves.assign(duration_s=moves["t_end"] - moves["t_start"], first=first)


def fit_weight_moves(data: Sequence[RunData]) -> list[Fit]:
    """load_s and offload_s from the spans a rank moved weights (`activity`: the loading share
    a run reports); the driver's overhead on top, from the decisions (`events.jsonl`): the mean
    decision-to-applied time less the mean span (a rank's first load apart)."""
    spans = pd.concat([weight_moves(d.activity) for d in data], ignore_index=True)
    decided = pd.concat([d.spans for d in data], ignore_index=True)
    fits = []
    for stage, name, overhead in (("load", "load_s", "expand_overhead_s"), ("offload", "offload_s", "shrink_overhead_s")):
        moved = spans[(spans["stage"] == stage) & ~spans["first"]]["duration_s"].to_numpy(float)
        whole = decided[(decided["stage"] == stage) & ~decided["first"]]["duration_s"].to_numpy(float)
        fits += _mean_fit(name, moved)
        if len(moved) and len(whole):
            extra = max(0.0, float(whole.mean() - moved.mean()))
            fits.append(Fit(overhead, extra, float(np.sqrt(np.mean((whole - moved.mean() - extra) ** 2))), len(whole)))
    return fits


def fit_worker_start(data: Sequence[RunData], load_s: float) -> list[Fit]:
    """worker_start_per_pipeline_s (w) from the first loads that waited for their worker
    (longer than a load by far), which came up at CostModel.worker_ready_s: the earlier of its
    turn, launch + (k + 1) * w * n, and its first expansion + w * n (n: pipelines started
    together). Least squares over w on a grid (the model is piecewise linear in w)."""
    turns, asked, observed = [], [], []
    for d in data:
        moves = d.spans
        first = moves[moves["first"] & (moves["duration_s"] > 3.0 * load_s + 1.0)]
        starts = startup_samples(d).set_index("pipeline_id")
        arrivals = _arrivals(d)
        for row in first.itertuples():
            if row.pipeline_id in starts.index:
                start, arrival = starts.loc[row.pipeline_id], arrivals[row.pipeline_id]
                count = float(start["pipelines"])
                turns.append((float(start["launch_s"]), (row.dp_rank + 1) * count, count))
                asked.append(row.t_start - arrival)
                observed.append(row.t_end - load_s - arrival)
    if not observed:
        return [Fit("worker_start_per_pipeline_s", 0.0, 0.0, 0)]
    launch, per_turn, n = (np.array(column) for column in zip(*turns, strict=True))
    grid = np.linspace(0.0, 2.0 * max(observed) / n.min(), 4001)[:, None]
    ready = np.minimum(launch + per_turn * grid, np.array(asked) + n * grid)
    sse = ((ready - np.array(observed)) ** 2).sum(axis=1)
    best = int(np.argmin(sse))
    return [Fit("worker_start_per_pipeline_s", float(grid[best, 0]), float(np.sqrt(sse[best] / len(observed))),
                len(observed))]


def _arrivals(d: RunData) -> dict[str, float]:
    from rlix.scenarios import parse_scenario

    return {p.id: p.arrival_s for p in parse_scenario(d.run.scenario).pipelines}


def startup_samples(d: RunData) -> pd.DataFrame:
    """Per pipeline of the run: pipelines started with it, launch_s (from its arrival to its
    init request) and init_s (its init holding)."""
    from rlix.scenarios import parse_scenario

    scenario = parse_scenario(d.run.scenario)
    pipelines = {p.id: p for p in scenario.pipelines}
    specs = {pid: spec for pid, spec in d.run.specs.items() if pid in pipelines}
    init = d.allocations[(d.allocations["priority"] == 0) & (d.allocations["cluster"] != ROLLOUT_CLUSTER)]
    holds = init.groupby("pipeline_id", observed=True).agg(t_start=("t_start", "min"), t_end=("t_end", "max"))
    waits = d.run.waits
    asked = waits[waits["priority"] == 0].groupby("pipeline_id", observed=True)["t_request"].min()
    rows = []
    for pid, hold in holds.iterrows():
        if pid in specs:
            arrival = pipelines[str(pid)].arrival_s
            rows.append({"pipeline_id": str(pid), "pipelines": startup_pipelines(pipelines, str(pid)),
                         "launch_s": float(asked.get(pid, hold["t_start"])) - arrival,
                         "init_s": float(hold["t_end"] - hold["t_start"])})
    return pd.DataFrame(rows, columns=["pipeline_id", "pipelines", "launch_s", "init_s"])


def fit_init(data: Sequence[RunData]) -> list[Fit]:
    samples = pd.concat([startup_samples(d) for d in data], ignore_index=True)
    if samples.empty:
        return []
    counts = samples["pipelines"].to_numpy(float)
    return [*_per_pipeline("launch", counts, samples["launch_s"].to_numpy(float)),
            *_per_pipeline("init", counts, samples["init_s"].to_numpy(float))]


def _per_pipeline(name: str, counts: np.ndarray, seconds: np.ndarray) -> list[Fit]:
    """`<name>_s` + `<name>_per_pipeline_s` * pipelines started together; with one count seen
    the intercept cannot be told from the slope, and start-up is taken as all per pipeline
    (it is CPU work shared among the pipelines starting)."""
    if np.ptp(counts) == 0:
        per = float(seconds.mean() / counts[0]) if counts[0] else 0.0
        rms = float(np.sqrt(np.mean((seconds - per * counts) ** 2)))
        return [Fit(f"{name}_s", 0.0, rms, len(seconds)), Fit(f"{name}_per_pipeline_s", per, rms, len(seconds))]
    return _linear_fits((f"{name}_s", f"{name}_per_pipeline_s"), np.column_stack([np.ones(len(counts)), counts]), seconds)


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
