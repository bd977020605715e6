"""What `rlix-sim run` and `rlix-sim compare` print: plain aligned text tables of a run's and a
comparison's figures (the figures themselves are `summary.json`'s, see rlix.runs.metrics)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from rlix.runs.text import format_table
from rlix.sim.compare import OVERALL_COLUMNS, Comparison, overall_figure


def print_run(name: str, summary: dict[str, Any], limit: str = "the scenario's max_time_s") -> None:
    """The one-line figures of a run and a table of its pipelines. `limit` names what set the
    run's time limit, for a run that did not finish (`--days 1` when the command gave it)."""
    overall = summary["overall"]
    print(
        f"{name}: policy {summary['policy']}, {summary['num_gpus']} GPUs, "
        f"makespan {summary['makespan_s']:.0f} s, {overall.get('steps')} steps, "
        f"{overall.get('steps_per_hour', 0):.2f} steps/h, GPU busy {overall.get('busy_share', 0):.1%} "
        f"(idle {overall.get('idle_share', 0):.1%}{_all_active_idle(overall)}{_waiting_idle(overall)})"
    )
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
        }
        for pid, s in summary["pipelines"].items()
    ]
    print(
        format_table(
            pd.DataFrame(rows),
            {"steps_per_h": "{:.2f}", "mean_step_s": "{:.1f}", "p95_step_s": "{:.1f}", "busy": "{:.1%}"},
        )
    )
    if not summary.get("finished", True):
        why = (f"stuck: nothing but ticks after t={summary['stalled_at_s']:.0f} s"
               if summary.get("stalled_at_s") is not None else f"{limit} was reached")
        print(f"did not finish: {', '.join(summary['unfinished'])} ({why})")


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
    formats = {key: fmt for key, _label, fmt in OVERALL_COLUMNS}
    formats["max step slowdown"] = "{:.2f}x"
    frame = comparison.overall_frame().rename(
        columns={**{k: label for k, label, _f in OVERALL_COLUMNS}, "max_step_slowdown": "max step slowdown"}
    )
    formats.update({label: fmt for _k, label, fmt in OVERALL_COLUMNS})
    print(
        f"{scenario.name}: {scenario.num_gpus} GPUs, {len(scenario.pipelines)} pipelines, seed {scenario.seed}\n"
    )
    print(format_table(frame, formats))
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
    print(
        format_table(
            comparison.pipeline_frame(),
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
