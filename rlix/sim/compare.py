"""`rlix-sim compare`: every policy on the same scenario, trace and seed, side by side.

Besides each policy's run, each pipeline is run alone twice:

- on its home GPUs (the static policy with no other pipeline), so every policy's step times can
  be given as a slowdown against the time the pipeline would take with its own GPUs and nobody
  to share with;
- with every GPU its mappings allow and nobody else (the `rlix` policy with no other pipeline):
  its *unshared* rate and its busy GPU-time.

The *ceiling* is total steps over a lower bound on the makespan, the largest of these:

- each pipeline's critical path: its arrival plus its unshared duration (it cannot go faster
  than alone with every GPU it may use);
- the work: the first arrival plus every pipeline's conserved GPU-seconds over the pool's
  GPUs (an oversubscribed pool cannot do more GPU-work per second than it has GPUs): its
  gang stages (training, log-probs, values: each takes its whole mapping for a duration no
  sharing changes) and the least GPU time its rollout can take in the engine, the decode
  cost no packing of trajectories on ranks avoids (`rlix.sim.bounds`). What rollout spends
  above that floor (small batches in a step's tail, prefills of recomputed prefixes, weight
  loads) depends on the policy, so it is left out and the bound stays a bound;
- the wide gangs: the first arrival plus the time of every gang stage on more than half the
  pool. Two such stages share a GPU wherever they are placed, so they run one after the
  other (on `blog-4on12`, four jobs that each train on 8 of 12 GPUs take turns);
- the inits in turn, when every pipeline's init stages are wide (and no unshared run was cut
  before its last step): they too run one after the other, so the last of them ends no
  earlier than the first arrival plus all their times, and the pipeline it belongs to still
  has all of its steps to run, at best at its unshared rate (the least time any pipeline's
  unshared run took after its inits). The unshared runs are rlix's, whose pipelines read their
  weights into host memory before they ask for an init's GPUs: no init starts before the
  earliest arrival plus its pipeline's read, and each init holds its GPUs only to copy the
  weights in (a policy that does not prefetch holds each read inside its init, which ends no
  earlier). On `blog-4on12` the fourth job to start cannot begin its first step before a read
  of 7 s and four inits of 60 s have run.

Set against it, a policy's steps per hour says how much sharing left on the table. It is a
ceiling in practice, not a proof: more GPUs also mean more of a pipeline's own rank moves
(weight loads, its training preempting its own rollout), so a shared pipeline can run a little
faster than unshared (up to 1.4% in the bundled scenarios: mixed-lora's lora-b under rlix).

The *JCT floor* is the same reasoning for the mean JCT of a stream of jobs, the highest of:

- the critical paths: the mean of each job's unshared duration;
- the work in turn: the pool as one machine whose speed is its GPUs, each job's conserved
  GPU-seconds (as above) its work on it, served shortest remaining work first, the least mean
  any order of that work reaches (`rlix.sim.bounds.srpt_mean_flow_s`);
- the inits in turn, when every job's inits take more than half the pool: they run one at a
  time in the least-mean order, and each job still runs its unshared time after them.

Each bounds the mean of any run (the critical paths with the caveat above): a floor in
practice, which set against a policy's mean JCT says how much waiting and sharing cost. On a
stream that leaves the pool idle between bursts it is the critical paths, which assume every
job has all the GPUs it may use.

Pipelines that differ only in id and arrival (a stream's jobs of one template) share their
alone runs (rlix.sim.alone.signature).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rlix.scenarios import Scenario
from rlix.sim.alone import signature
from rlix.sim.api import alone_on_home, alone_on_pool, simulate
from rlix.sim.bounds import rollout_gpu_s_floor, srpt_mean_flow_s
from rlix.sim.costs import CostModel

OVERALL_COLUMNS = (
    ("steps_per_hour", "steps/h", "{:.2f}"),
    ("jobs.experiments_per_hour", "exp/h", "{:.2f}"),
    ("jobs.mean_jct_s", "mean JCT s", "{:,.0f}"),
    ("jobs.p95_jct_s", "p95 JCT s", "{:,.0f}"),
    ("jobs.mean_queueing_s", "mean queue s", "{:,.0f}"),
    ("jobs.p95_queueing_s", "p95 queue s", "{:,.0f}"),
    ("jobs.mean_slowdown", "mean slowdown", "{:.2f}x"),
    ("jobs.p95_slowdown", "p95 slowdown", "{:.2f}x"),
    ("steps_per_hour_per_gpu", "steps/h/GPU", "{:.3f}"),
    ("tokens_per_gpu_hour", "tok/GPU-h", "{:,.0f}"),
    ("busy_share", "busy", "{:.1%}"),
    ("loading_share", "loading", "{:.1%}"),
    ("idle_share", "idle", "{:.1%}"),
    ("idle_share_all_active", "idle (all active)", "{:.1%}"),
    ("idle_share_while_waiting", "idle (jobs wait)", "{:.1%}"),
    ("mean_step_time_s", "mean step s", "{:.1f}"),
    ("p95_step_time_s", "p95 step s", "{:.1f}"),
    ("preemptions", "preempt", "{:,.0f}"),
    ("recomputed_tokens", "recomputed tok", "{:,.0f}"),
)


@dataclass(frozen=True)
class Unshared:
    """A pipeline's run with every GPU its mappings allow and nobody else."""

    steps: int
    duration_s: float  # from its arrival to its end (its last step, or the scenario's cut)
    gang_gpu_s: float = 0.0  # GPU-seconds of its gang stages (training, log-probs, values)
    rollout_gpu_s: float = 0.0  # the least GPU-seconds its rollout can take (rlix.sim.bounds)
    #: (GPUs, seconds) of each of its gang stages, to find those on more than half a pool
    gang_stages: tuple[tuple[int, float], ...] = ()
    #: (GPUs, seconds) of its init stages (among `gang_stages`), and how long it ran after the
    #: last of them ended
    init_stages: tuple[tuple[int, float], ...] = ()
    after_init_s: float = 0.0
    finished: bool = True  # it ran its last step before the scenario's cut
    #: When its first init started after its arrival: the weights it prefetched before it, if
    #: any (rlix.pipelines.ops.Prefetch), which no init can start before under any policy
    #: that prefetches, and which one that does not holds inside the inits instead.
    first_init_s: float = 0.0

    @property
    def conserved_gpu_s(self) -> float:
        """The GPU-seconds no policy avoids: its gang stages and its rollout's decode floor."""
        return self.gang_gpu_s + self.rollout_gpu_s

    @property
    def steps_per_hour(self) -> float | None:
        return self.steps * 3600.0 / self.duration_s if self.duration_s > 0 else None


@dataclass
class Comparison:
    summaries: dict[str, dict[str, Any]]
    alone_step_s: dict[str, float] = field(default_factory=dict)
    run_dirs: dict[str, Path | None] = field(default_factory=dict)
    unshared: dict[str, Unshared] = field(default_factory=dict)
    arrival_s: dict[str, float] = field(default_factory=dict)
    alone_jct_s: dict[str, float] = field(default_factory=dict)
    num_gpus: int = 0

    def makespan_bounds_s(self) -> dict[str, float] | None:
        """The makespans no policy beats, by name (module docstring; "wide gangs" only where some
        gang stage takes more than half the pool, "inits in turn" only where every pipeline's
        inits do); None without every pipeline's unshared run."""
        if not self.unshared or set(self.unshared) != set(self.arrival_s):
            return None
        bounds = {"critical path": max(self.arrival_s[pid] + run.duration_s for pid, run in self.unshared.items())}
        if self.num_gpus:
            first_s = min(self.arrival_s.values())
            work_gpu_s = sum(r.conserved_gpu_s for r in self.unshared.values())
            bounds["work"] = first_s + work_gpu_s / self.num_gpus
            wide = [s for r in self.unshared.values() for gpus, s in r.gang_stages if 2 * gpus > self.num_gpus]
            if wide:
                bounds["wide gangs"] = first_s + sum(wide)
            if self._inits_take_turns():
                inits_s = sum(s for r in self.unshared.values() for _, s in r.init_stages)
                after_s = min(r.after_init_s for r in self.unshared.values())
                ready_s = min(self.arrival_s[pid] + r.first_init_s for pid, r in self.unshared.items())
                bounds["inits in turn"] = ready_s + inits_s + after_s
        return bounds

    def _inits_take_turns(self) -> bool:
        """Every pipeline ran to its last step alone and each of its inits takes more than half
        the pool, so no two inits run at once (the bounds "inits in turn")."""
        return all(run.finished and run.init_stages and all(2 * gpus > self.num_gpus for gpus, _ in run.init_stages)
                   for run in self.unshared.values())

    def makespan_bound_s(self) -> float | None:
        """The largest of the bounds (the critical path, the work, the wide gangs, the inits in
        turn); None without every pipeline's unshared run."""
        bounds = self.makespan_bounds_s()
        return None if bounds is None else max(bounds.values())

    def mean_jct_bounds_s(self) -> dict[str, float] | None:
        """The mean JCTs no policy beats, by name (module docstring; "inits in turn" only where
        every job's inits take more than half the pool); None unless every pipeline's unshared
        run ran to its last step."""
        runs = self.unshared
        if not runs or set(runs) != set(self.arrival_s) or not all(run.finished for run in runs.values()):
            return None
        bounds = {"critical paths": sum(run.duration_s for run in runs.values()) / len(runs)}
        if self.num_gpus:
            work = [(self.arrival_s[pid], run.conserved_gpu_s / self.num_gpus) for pid, run in runs.items()]
            bounds["work in turn"] = srpt_mean_flow_s(work)
            if self._inits_take_turns():
                inits = [(self.arrival_s[pid], sum(s for _, s in run.init_stages)) for pid, run in runs.items()]
                after_s = sum(run.after_init_s for run in runs.values()) / len(runs)
                bounds["inits in turn"] = srpt_mean_flow_s(inits) + after_s
        return bounds

    def mean_jct_floor_s(self) -> float | None:
        """The highest of the mean-JCT bounds; None without them."""
        bounds = self.mean_jct_bounds_s()
        return None if bounds is None else max(bounds.values())

    def ceiling_steps_per_hour(self) -> float | None:
        """Total steps over the makespan bound: see the module docstring."""
        bound_s = self.makespan_bound_s()
        if bound_s is None:
            return None
        steps = sum(run.steps for run in self.unshared.values())
        return steps * 3600.0 / bound_s if bound_s > 0 else None

    def slowdown(self, policy: str, pipeline_id: str) -> float:
        """The pipeline's mean step time under `policy` over its mean step time alone on its
        home: its *step* slowdown, not the job figures' slowdown (JCT over alone JCT), which
        also counts queueing and the inits (nan without alone runs)."""
        alone = self.alone_step_s.get(pipeline_id)
        mine = self.summaries[policy]["pipelines"].get(pipeline_id, {}).get("mean_step_time_s")
        if not alone or mine is None:
            return float("nan")
        return float(mine) / alone

    def overall_frame(self) -> pd.DataFrame:
        rows = []
        for policy, summary in self.summaries.items():
            overall = summary["overall"]
            row = {"policy": policy, **{key: overall_figure(overall, key) for key, _label, _fmt in OVERALL_COLUMNS}}
            slowdowns = [self.slowdown(policy, pid) for pid in summary["pipelines"]]
            # Named apart from the job slowdowns beside it (JCT over alone JCT): a step slowdown
            # leaves out queueing and inits, so its max could read below their p95.
            row["max_step_slowdown"] = max(slowdowns) if slowdowns else float("nan")
            row["finished"] = "yes" if summary.get("finished", True) else "NO"
            rows.append(row)
        return pd.DataFrame(rows)

    def pipeline_frame(self) -> pd.DataFrame:
        rows = []
        for policy, summary in self.summaries.items():
            for pid, stats in summary["pipelines"].items():
                waits = stats.get("queue_wait_s", {})
                unshared = self.unshared.get(pid)
                rows.append(
                    {
                        "policy": policy,
                        "pipeline_id": pid,
                        "steps": stats.get("steps"),
                        "steps_per_h": stats.get("steps_per_hour"),
                        "unshared_steps_per_h": unshared.steps_per_hour if unshared else None,
                        "mean_step_s": stats.get("mean_step_time_s"),
                        "p95_step_s": stats.get("p95_step_time_s"),
                        "alone_step_s": self.alone_step_s.get(pid),
                        "step_slowdown": self.slowdown(policy, pid),
                        "mean_wait_s": _mean_wait(waits),
                    }
                )
        return pd.DataFrame(rows)

    def as_json(self) -> dict[str, dict[str, Any]]:
        keys = {"steps_per_hour": "steps_per_hour", "busy_share": "busy_share", "idle_share": "idle_share",
                "idle_share_all_active": "idle_share_all_active",
                "idle_share_while_waiting": "idle_share_while_waiting", "mean_step_s": "mean_step_time_s",
                "preemptions": "preemptions"}
        ceiling = self.ceiling_steps_per_hour()
        bounds = self.makespan_bounds_s()
        jct_bounds = self.mean_jct_bounds_s()
        jct_floor_s = None if jct_bounds is None else max(jct_bounds.values())
        return {
            policy: {**{name: overall_figure(s["overall"], key) for name, key in keys.items()},
                     "jobs": dict(s["overall"].get("jobs") or {}), "ceiling_steps_per_hour": ceiling,
                     "makespan_bounds_s": None if bounds is None else dict(bounds),
                     "mean_jct_floor_s": jct_floor_s,
                     "mean_jct_bounds_s": None if jct_bounds is None else dict(jct_bounds)}
            for policy, s in self.summaries.items()
        }


def overall_figure(overall: dict[str, Any], key: str) -> Any:
    """An overall figure of a summary; `idle_share_all_active` is its all_active window's idle
    share (None without such a window), `idle_share_while_waiting` the idle share while some
    job waits (None if none did); `jobs.X` is figure X of its job figures."""
    if key == "idle_share_all_active":
        return (overall.get("all_active") or {}).get("idle_share")
    if key == "idle_share_while_waiting":
        return (overall.get("while_waiting") or {}).get("idle_share")
    if key.startswith("jobs."):
        return (overall.get("jobs") or {}).get(key.removeprefix("jobs."))
    return overall.get(key)


def _mean_wait(waits: dict[str, Any]) -> float:
    means = [w.get("mean", 0.0) * w.get("count", 1) for w in waits.values() if isinstance(w, dict)]
    counts = [w.get("count", 1) for w in waits.values() if isinstance(w, dict)]
    return sum(means) / sum(counts) if counts and sum(counts) else 0.0


def compare(
    scenario: Scenario,
    policies: Sequence[str],
    *,
    trace: str | None = None,
    columns: dict[str, str] | None = None,
    seed: int | None = None,
    out: Path | None = None,
    alone: bool = True,
    progress: Callable[[str, float], None] | None = None,
) -> Comparison:
    from rlix.sim.api import resolve_scenario

    base = resolve_scenario(scenario, None, trace, columns, seed)
    comparison = Comparison({}, num_gpus=base.num_gpus)
    if alone:  # first: every policy's job figures take the alone times
        _run_alone(comparison, base, progress)
    for policy in policies:
        result = simulate(
            base,
            policy,
            out=None if out is None else out / policy,
            overwrite=True,
            progress=None if progress is None else functools.partial(progress, policy),
            alone_s=comparison.alone_jct_s or None,
        )
        comparison.summaries[policy] = result.summary
        comparison.run_dirs[policy] = result.run_dir
    return comparison


def _run_alone(
    comparison: Comparison, base: Scenario, progress: Callable[[str, float], None] | None
) -> None:
    """Each pipeline alone on its home, then alone with every GPU its mappings allow; runs
    shared by pipelines of one signature."""
    home_runs: dict[str, dict[str, Any]] = {}
    pool_runs: dict[str, dict[str, Any]] = {}

    def run(alone: Scenario, label: str) -> dict[str, Any]:
        report = None if progress is None else (lambda t: progress(label, t))
        result = simulate(alone, plots=False, progress=report)
        activity = result.tables["activity"]
        gang = activity[(activity["cluster"] != "actor_infer") & (activity["kind"] == "busy")]
        stages = gang.groupby(["cluster", "stage", "t_start", "t_end"], observed=True)["gpu"].count().reset_index()
        inits = stages[stages["stage"] == "init"]
        summary: dict[str, Any] = dict(
            result.summary,
            gang_gpu_s=float((gang["t_end"] - gang["t_start"]).sum()),
            rollout_gpu_s=rollout_floor(alone, result.tables["rollouts"]),
            gang_stages=_gpus_and_seconds(stages),
            init_stages=_gpus_and_seconds(inits),
            # An alone run arrives at 0, so its makespan is when it ended.
            after_init_s=float(result.summary["makespan_s"]) - float(inits["t_end"].max()) if len(inits) else 0.0,
            first_init_s=float(inits["t_start"].min()) if len(inits) else 0.0,
        )
        return summary

    for pipeline in base.pipelines:
        pid = pipeline.id
        key = signature(base, pid)
        comparison.arrival_s[pid] = pipeline.arrival_s
        if key not in home_runs:
            home_runs[key] = run(alone_on_home(base, pid), f"{pid} alone")
            pool_runs[key] = run(alone_on_pool(base, pid), f"{pid} unshared")
        home, pool = home_runs[key], pool_runs[key]
        (alone_figures,) = home["pipelines"].values()
        comparison.alone_step_s[pid] = alone_figures.get("mean_step_time_s") or float("nan")
        if home.get("finished", True):  # one cut at the scenario's end has no alone time
            comparison.alone_jct_s[pid] = float(home["makespan_s"])
        if pool["pipelines"]:
            (unshared,) = pool["pipelines"].values()
            # A run cut before its last step says nothing of the time its steps need.
            finished = unshared.get("finish_s") is not None
            comparison.unshared[pid] = Unshared(
                int(unshared["steps"]), float(pool["makespan_s"]), pool["gang_gpu_s"], pool["rollout_gpu_s"],
                pool["gang_stages"], pool["init_stages"], pool["after_init_s"], finished,
                pool["first_init_s"],
            )


def _gpus_and_seconds(stages: pd.DataFrame) -> tuple[tuple[int, float], ...]:
    """(GPUs, seconds) of each stage of a frame of stages (one row per stage run)."""
    return tuple(zip(stages["gpu"].tolist(), (stages["t_end"] - stages["t_start"]).tolist(), strict=True))


def rollout_floor(alone: Scenario, rollouts: pd.DataFrame) -> float:
    """The least GPU-seconds the rollout of `alone`'s one pipeline can take for the trajectories
    it completed (rlix.sim.bounds)."""
    (pipeline,) = alone.pipelines
    spec = alone.pipeline_specs("rlix")[pipeline.id]
    costs = CostModel.for_model(pipeline.model, alone.topology_config.gpu, alone.costs)
    done = rollouts[rollouts["status"] == "completed"]
    pairs = zip(done["prompt_tokens"].tolist(), done["response_tokens"].tolist(), strict=True)
    return rollout_gpu_s_floor(costs, spec.rollout.tp, alone.engine.max_batch, pairs)


def plot_comparison(comparison: Comparison, path: Path) -> Path:
    """The comparison plot (`rlix.runs.compare_plot`): the policies' runs, the ceiling and
    each pipeline's slowdown against its time alone on its home."""
    from rlix.runs.compare_plot import plot_summaries

    slowdowns = {
        policy: {pid: comparison.slowdown(policy, pid) for pid in summary["pipelines"]}
        for policy, summary in comparison.summaries.items()
    }
    return plot_summaries(
        comparison.summaries,
        path,
        ceiling=comparison.ceiling_steps_per_hour(),
        slowdowns=slowdowns if comparison.alone_step_s else None,
    )
