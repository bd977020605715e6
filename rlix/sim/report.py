"""What `rlix-sim run` and `rlix-sim compare` print: plain aligned text tables of a run's and a
comparison's figures (the figures themselves are `summary.json`'s, see rlix.runs.metrics)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from rlix.runs.breakdown import group_of
from rlix.runs.text import format_table
from rlix.sim.compare import OVERALL_COLUMNS, Comparison, overall_figure

#: Past this many pipelines (a stream of jobs: lab-day's 273, lab-day-1024's 1,044) the printed
#: pipeline tables give one row per group of jobs (the id less a trailing `-<n>`, as
#: `rlix-sim jobs` groups them), means over its jobs; every job's figures stay in the run
#: folders' summary.json.
MAX_PIPELINE_ROWS = 40
#: The policies' figures, printed as three tables of one row per policy that each fit a
#: terminal (one table of them all ran to 273 characters a line).
POLICY_TABLES = (
    ("jobs", ("steps/h", "exp/h", "mean JCT s", "p95 JCT s", "mean queue s", "p95 queue s", "mean slowdown",
              "p95 slowdown", "finished")),
    ("GPU time", ("steps/h/GPU", "tok/GPU-h", "busy", "loading", "idle", "idle (all active)", "idle (jobs wait)")),
    ("steps and moves", ("mean step s", "p95 step s", "max step slowdown", "preempt", "recomputed tok")),
)
#: The figures of a grouped row that are counted, not averaged: summed over the group's jobs.
_SUMMED = frozenset({"steps", "preemptions"})
#: The columns of a grouped row that give their distinct values, not a mean.
_DISTINCT = frozenset({"kind", "max_staleness"})


def print_run(name: str, summary: dict[str, Any], limit: str = "the scenario's max_time_s",
              run_dir: Any = None) -> None:
    """The one-line figures of a run, its jobs' line (JCT, wait to start, slowdown) and a table
    of its pipelines: one row per pipeline, or per group of jobs past MAX_PIPELINE_ROWS
    pipelines (`run_dir`, if given, is named where every job's figures are). `limit` names
    what set the run's time limit, for a run that did not finish (`--days 1` when the command
    gave it)."""
    overall = summary["overall"]
    print(
        f"{name}: policy {summary['policy']}, {summary['num_gpus']} GPUs, "
        f"makespan {summary['makespan_s']:.0f} s, {overall.get('steps')} steps, "
        f"{overall.get('steps_per_hour', 0):.2f} steps/h, GPU busy {overall.get('busy_share', 0):.1%} "
        f"(idle {overall.get('idle_share', 0):.1%}{_all_active_idle(overall)}{_waiting_idle(overall)})"
    )
    jobs_line = _jobs_line(overall.get("jobs"))
    if jobs_line:
        print(jobs_line)
    rows = [
        {
            "pipeline": pid,
            "kind": s.get("kind"),
            "max_staleness": _staleness_text(s.get("max_staleness")),
            "steps": s.get("steps"),
            "steps_per_h": s.get("steps_per_hour"),
            "mean_step_s": s.get("mean_step_time_s"),
            "p95_step_s": s.get("p95_step_time_s"),
            "busy": s.get("busy_share"),
            "preemptions": s.get("preemptions"),
            "queueing_s": s.get("queueing_s"),
            "jct_s": s.get("jct_s"),
        }
        for pid, s in summary["pipelines"].items()
    ]
    frame = pd.DataFrame(rows)
    formats = {"steps_per_h": "{:.2f}", "mean_step_s": "{:.1f}", "p95_step_s": "{:.1f}", "busy": "{:.1%}",
               "preemptions": "{:,.0f}", "steps": "{:,.0f}", "queueing_s": "{:,.0f}", "jct_s": "{:,.0f}"}
    if len(frame) > MAX_PIPELINE_ROWS:
        where = f"{run_dir}/summary.json" if run_dir is not None else "the run folder's summary.json"
        print(f"{len(frame):,} pipelines, one row per group of jobs (steps and preemptions summed,"
              f" the rest means per job; every job: {where}, `pipelines`)")
        frame = grouped_pipelines(frame, "pipeline").rename(columns={"pipeline": "group"})
    print(format_table(frame, formats))
    if not summary.get("finished", True):
        why = (f"stuck: nothing but ticks after t={summary['stalled_at_s']:.0f} s"
               if summary.get("stalled_at_s") is not None else f"{limit} was reached")
        print(f"did not finish: {', '.join(summary['unfinished'])} ({why})")


def grouped_pipelines(frame: pd.DataFrame, id_column: str, by: tuple[str, ...] = ()) -> pd.DataFrame:
    """`frame` (a row per pipeline, its id in `id_column`) with one row per group of jobs
    (rlix.runs.breakdown.group_of; within each value of the `by` columns, in their order of
    first appearance): the group's name in `id_column`, then `jobs`, its count; the columns in
    _DISTINCT give their distinct values joined by "/", those in _SUMMED their sum, the others
    (numbers) their mean over the group's jobs, nulls left out."""
    keys = [*by, "_group"]
    frame = frame.assign(_group=frame[id_column].astype(str).map(group_of))
    grouped = frame.groupby(keys, sort=False, dropna=False)
    out: dict[str, Any] = {"jobs": grouped.size()}
    for column in frame.columns:
        if column in keys or column == id_column:
            continue
        values = grouped[column]
        if column in _SUMMED:
            out[column] = values.sum(min_count=1)
        elif column in _DISTINCT:
            out[column] = values.agg(lambda v: "/".join(dict.fromkeys(str(x) for x in v)))
        else:
            out[column] = values.mean()
    table = pd.DataFrame(out).reset_index().rename(columns={"_group": id_column})
    return table[[*by, id_column, "jobs", *(c for c in frame.columns if c not in keys and c != id_column)]]


def _jobs_line(jobs: dict[str, Any] | None) -> str:
    """One line of a run's job figures (summary.json's overall.jobs): the jobs finished, the
    mean and p95 JCT, wait to start and slowdown; "" for a run with no job figures."""
    if not jobs or not jobs.get("count"):
        return ""

    def seconds(key: str) -> str:
        value = jobs.get(key)
        return "-" if value is None else f"{value:,.0f} s"

    def ratio(key: str) -> str:
        value = jobs.get(key)
        return "-" if value is None else f"{value:.2f}"

    return (f"jobs: {jobs['count']:,} ({jobs.get('finished', 0):,} finished), mean JCT {seconds('mean_jct_s')}"
            f" (p50 {seconds('p50_jct_s')}, p95 {seconds('p95_jct_s')}), wait to start mean"
            f" {seconds('mean_queueing_s')} (p95 {seconds('p95_queueing_s')}), slowdown mean"
            f" {ratio('mean_slowdown')} (p95 {ratio('p95_slowdown')})")


def _staleness_text(staleness: Any) -> Any:
    """A multi-LoRA pipeline's bound per adapter as `a0=0 a1=1`, not a dict's repr."""
    if isinstance(staleness, dict):
        return " ".join(f"{adapter}={bound}" for adapter, bound in staleness.items())
    return staleness


def _all_active_idle(overall: dict[str, Any]) -> str:
    window = overall.get("all_active")
    if window is None or overall_figure(overall, "idle_share_all_active") is None:
        return ""
    return (f"; {window['idle_share']:.1%} while every pipeline was in the run,"
            f" {window['t_start']:.0f}-{window['t_end']:.0f} s")


def _waiting_idle(overall: dict[str, Any]) -> str:
    waiting = overall.get("while_waiting")
    if not waiting:
        return ""
    return f"; {waiting['idle_share']:.1%} while jobs waited to start ({waiting['waiting_s']:,.0f} s)"


def _print_jct_floor(comparison: Comparison) -> None:
    """The mean JCT no policy beats, its bounds, and each policy's mean JCT over it."""
    bounds = comparison.mean_jct_bounds_s()
    if not bounds or max(bounds.values()) <= 0:
        return
    floor_s = max(bounds.values())
    terms = ", ".join(f"{name} {seconds:,.0f} s" for name, seconds in bounds.items())
    ratios = ", ".join(
        f"{policy} {summary['overall']['jobs']['mean_jct_s'] / floor_s:.2f}x"
        for policy, summary in comparison.summaries.items()
        if (summary["overall"].get("jobs") or {}).get("mean_jct_s") is not None
    )
    print(f"JCT floor: {floor_s:,.0f} s, the mean JCT no policy beats ({terms};"
          f" the highest: {max(bounds, key=lambda name: bounds[name])}); mean JCT over it: {ratios}")


def print_comparison(scenario: Any, comparison: Comparison) -> None:
    """The policies' table, the ceiling, the JCT floor and the pipelines' table."""
    formats = {label: fmt for _key, label, fmt in OVERALL_COLUMNS}
    formats["max step slowdown"] = "{:.2f}x"
    frame = comparison.overall_frame().rename(
        columns={**{k: label for k, label, _f in OVERALL_COLUMNS}, "max_step_slowdown": "max step slowdown"}
    )
    print(f"{scenario.name}: {scenario.num_gpus} GPUs, {len(scenario.pipelines)} pipelines, seed {scenario.seed}")
    for title, columns in POLICY_TABLES:
        print(f"\n{title}\n{format_table(frame[['policy', *columns]], formats)}")
    ceiling = comparison.ceiling_steps_per_hour()
    if ceiling is not None:
        shares = ", ".join(
            f"{policy} {summary['overall']['steps_per_hour'] / ceiling:.0%}"
            for policy, summary in comparison.summaries.items()
            if summary["overall"].get("steps_per_hour") is not None
        )
        bounds = comparison.makespan_bounds_s() or {}
        binding = max(bounds, key=lambda name: bounds[name])
        terms = ", ".join(f"{name} {seconds:,.0f} s" for name, seconds in bounds.items())
        print(f"\nceiling: {ceiling:.2f} steps/h, all steps over the longest makespan no policy beats"
              f" ({terms}; the longest: {binding}); reached: {shares}")
    _print_jct_floor(comparison)
    print()
    pipelines = comparison.pipeline_frame()
    if len(pipelines) > MAX_PIPELINE_ROWS * max(1, len(comparison.summaries)):
        print(f"{pipelines['pipeline_id'].nunique():,} pipelines, one row per policy and group of jobs"
              " (steps summed, the rest means per job; every job: each policy's run folder's"
              " summary.json, `pipelines`)")
        pipelines = grouped_pipelines(pipelines, "pipeline_id", by=("policy",)).rename(
            columns={"pipeline_id": "group"})
    print(
        format_table(
            pipelines,
            {
                "steps_per_h": "{:.2f}",
                "unshared_steps_per_h": "{:.2f}",
                "mean_step_s": "{:.1f}",
                "p95_step_s": "{:.1f}",
                "alone_step_s": "{:.1f}",
                "step_slowdown": "{:.2f}x",
                "mean_wait_s": "{:.1f}",
            },
        )
    )
