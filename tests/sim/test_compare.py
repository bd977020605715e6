"""`rlix-sim compare`: the ceiling (each pipeline as fast as alone with all its GPUs, from its
arrival) and the per-pipeline rates over each pipeline's own span."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any

import pytest

from rlix.scenarios import load_scenario
from rlix.scenarios.load import validate_scenario
from rlix.sim.cli import main
from rlix.sim.compare import compare


def tiny(only: str | None = None, **arrivals: float) -> Any:
    data = load_scenario("tiny").model_dump(mode="json", exclude_none=True)
    if only is not None:
        data["pipelines"] = [p for p in data["pipelines"] if p["id"] == only]
    for pipeline in data["pipelines"]:
        pipeline["arrival_s"] = arrivals.get(pipeline["id"], pipeline.get("arrival_s", 0.0))
    return validate_scenario(data)


def test_one_pipeline_at_zero_reaches_the_ceiling_exactly_under_rlix() -> None:
    """Alone and arriving at 0, the rlix run is the pipeline's unshared run: same steps, same
    makespan, so its steps per hour is the ceiling."""
    comparison = compare(tiny(only="ft"), ["rlix", "static"])
    ceiling = comparison.ceiling_steps_per_hour()
    assert ceiling == pytest.approx(comparison.summaries["rlix"]["overall"]["steps_per_hour"], rel=1e-12)
    assert comparison.summaries["static"]["overall"]["steps_per_hour"] <= ceiling * (1 + 1e-9)


def test_the_ceiling_counts_arrivals_and_no_policy_beats_it() -> None:
    """lora arrives 200 s late: the ceiling ends at the later of the two unshared finishes
    (worked out here from the unshared runs) and is above every policy's steps per hour.
    A pipeline's rate under a policy stays within a few % of its unshared rate (it can be a
    little above: with fewer GPUs it moves fewer ranks of its own)."""
    comparison = compare(tiny(lora=200.0), ["rlix", "gap-ratio", "static", "sequential"])
    runs = comparison.unshared
    assert set(runs) == {"ft", "lora"}
    end_s = max(runs["ft"].duration_s, 200.0 + runs["lora"].duration_s)
    assert comparison.ceiling_steps_per_hour() == pytest.approx(
        (runs["ft"].steps + runs["lora"].steps) * 3600.0 / end_s
    )
    for policy, summary in comparison.summaries.items():
        assert summary["overall"]["steps_per_hour"] <= comparison.ceiling_steps_per_hour() * 1.001, policy
        for pid, stats in summary["pipelines"].items():
            assert stats["steps_per_hour"] <= runs[pid].steps_per_hour * 1.05, (policy, pid)
    frame = comparison.pipeline_frame()
    assert not frame["unshared_steps_per_h"].isna().any()


def test_no_alone_runs_mean_no_ceiling() -> None:
    comparison = compare(tiny(), ["rlix"], alone=False)
    assert comparison.ceiling_steps_per_hour() is None
    assert math.isnan(comparison.slowdown("rlix", "ft"))


def test_compare_prints_the_ceiling_and_the_share_each_policy_reached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", "tiny", "--quiet", "--policies", "rlix,static", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "ceiling: " in out and "reached: rlix " in out
    assert "JCT floor: " in out and "(critical paths " in out and "mean JCT over it: rlix " in out
    assert "(critical path " in out and "; the longest: critical path)" in out  # tiny: no wide gangs
    assert "idle (all active)" in out and "unshared_steps_per_h" in out


def test_alone_runs_of_a_cut_scenario_stop_at_the_cut() -> None:
    """tiny cut at 85 s, lora arriving at 10 s (unshared, ft needs 105 s and lora 88 s for all
    their steps): each unshared run has the time its pipeline had (85 s and 75 s), not all its
    steps; the ceiling is their steps over the cut."""
    data = tiny(lora=10.0).model_dump(mode="json", exclude_none=True)
    data["max_time_s"] = 85.0
    comparison = compare(validate_scenario(data), ["rlix"])
    runs = comparison.unshared
    assert runs["ft"].duration_s == pytest.approx(85.0)
    assert runs["lora"].duration_s == pytest.approx(75.0)
    full = compare(tiny(lora=10.0), ["rlix"]).unshared
    assert runs["ft"].steps < full["ft"].steps and runs["lora"].steps < full["lora"].steps
    assert comparison.ceiling_steps_per_hour() == pytest.approx(
        (runs["ft"].steps + runs["lora"].steps) * 3600.0 / 85.0
    )


def test_the_ceiling_bounds_an_oversubscribed_pool_by_its_work() -> None:
    """By hand: two jobs of 10 steps arrive at 0 and 30 on 8 GPUs; alone with every GPU each
    takes 100 s, its gang stages 800 GPU-s. Critical path: 30 + 100 = 130 s; work: 0 + 1,600 /
    8 = 200 s; the bound is the larger, 200 s, so 20 steps in 200 s: 360 steps/h."""
    from rlix.sim.compare import Comparison, Unshared

    comparison = Comparison({}, num_gpus=8, arrival_s={"a": 0.0, "b": 30.0},
                            unshared={"a": Unshared(10, 100.0, 800.0), "b": Unshared(10, 100.0, 800.0)})
    assert comparison.makespan_bound_s() == pytest.approx(200.0)
    assert comparison.ceiling_steps_per_hour() == pytest.approx(360.0)
    comparison.num_gpus = 32  # a larger pool: the critical path binds
    assert comparison.makespan_bound_s() == pytest.approx(130.0)


def test_the_ceiling_serialises_gangs_on_more_than_half_the_pool() -> None:
    """By hand: four jobs on 12 GPUs, each 100 s alone with every GPU, each with 4 gang stages
    of 30 s on 8 GPUs (two such stages share a GPU wherever they go) and one of 10 s on 4 GPUs.
    Critical path 100 s; work (4 x (4 x 240 + 40) + 4 x 600 rollout floor) / 12 = 533.3 s;
    the wide gangs one after another: 16 x 30 = 480 s, which binds without the rollout floor.
    On 16 GPUs two 8-GPU stages fit side by side: no stage is wide, and the work binds
    (4,000 / 16 = 250 s)."""
    from rlix.sim.compare import Comparison, Unshared

    stages = ((8, 30.0),) * 4 + ((4, 10.0),)
    job = Unshared(10, 100.0, 1000.0, 600.0, stages)
    comparison = Comparison({}, num_gpus=12, arrival_s=dict.fromkeys("abcd", 0.0), unshared=dict.fromkeys("abcd", job))
    assert comparison.makespan_bound_s() == pytest.approx(6400.0 / 12)
    comparison.unshared = dict.fromkeys("abcd", Unshared(10, 100.0, 1000.0, 0.0, stages))
    assert comparison.makespan_bound_s() == pytest.approx(480.0)  # the rollout floor gone: gangs bind
    assert comparison.makespan_bounds_s() == pytest.approx({"critical path": 100.0, "work": 4000 / 12, "wide gangs": 480.0})
    comparison.num_gpus = 16
    assert comparison.makespan_bound_s() == pytest.approx(250.0)
    assert "wide gangs" not in (comparison.makespan_bounds_s() or {})


def test_inits_on_more_than_half_the_pool_run_in_turn_before_the_last_ones_steps() -> None:
    """By hand: three jobs on 12 GPUs arriving at 5, 0 and 40 s, each with an init of 60 s on 8
    GPUs (a and b) or of 50 s and 20 s on 8 (c, two clusters), and 300, 250 and 400 s of its
    unshared run left after its inits. The inits take turns from the first arrival: the last
    one ends at 0 + 60 + 60 + 50 + 20 = 190 s at the earliest, and its job still has at least
    the least of the times left: 190 + 250 = 440 s. A job whose init fits beside another's (4
    GPUs of 12), or one without an init, and the bound is not there."""
    from rlix.sim.compare import Comparison, Unshared

    def job(inits: tuple[tuple[int, float], ...], after_s: float) -> Unshared:
        return Unshared(10, 100.0, 0.0, 0.0, inits, inits, after_s)

    unshared = {"a": job(((8, 60.0),), 300.0), "b": job(((8, 60.0),), 250.0),
                "c": job(((8, 50.0), (8, 20.0)), 400.0)}
    comparison = Comparison({}, num_gpus=12, arrival_s={"a": 5.0, "b": 0.0, "c": 40.0}, unshared=unshared)
    bounds = comparison.makespan_bounds_s() or {}
    assert bounds["inits in turn"] == pytest.approx(440.0)
    assert comparison.makespan_bound_s() == pytest.approx(440.0)
    comparison.unshared = {**unshared, "c": job(((4, 50.0), (8, 20.0)), 400.0)}
    assert "inits in turn" not in (comparison.makespan_bounds_s() or {})
    comparison.unshared = {**unshared, "c": job((), 400.0)}
    assert "inits in turn" not in (comparison.makespan_bounds_s() or {})
    # Jobs that read their weights before their first init (7 s for a and b, 30 s for c): no
    # init starts before min(5 + 7, 0 + 7, 40 + 30) = 7 s, so the last ends at 197 s at the
    # earliest and the bound is 447 s.
    first = {"a": 7.0, "b": 7.0, "c": 30.0}
    comparison.unshared = {pid: dataclasses.replace(run, first_init_s=first[pid]) for pid, run in unshared.items()}
    assert (comparison.makespan_bounds_s() or {})["inits in turn"] == pytest.approx(447.0)


def test_the_jct_floor_by_hand() -> None:
    """The three jobs above, with 1,200, 600 and 2,400 GPU-seconds of work on 12 GPUs (100, 50
    and 200 s of the pool) and 100-s critical paths. Inits in turn, shortest remaining first:
    b 0-60, a 60-120 (a has 60 left at 60 s, c 70), c 120-190; from their arrivals 60, 115
    and 150 s, plus the mean 316.7 s each runs after its inits: 425 s. Work in turn: b 0-50, a
    50-150, c 150-350: (50 + 145 + 310) / 3 = 168.3 s. A job whose unshared run was cut, and
    there is no floor."""
    from rlix.sim.compare import Comparison, Unshared

    def job(work: float, inits: tuple[tuple[int, float], ...], after_s: float, finished: bool = True) -> Unshared:
        return Unshared(10, 100.0, work, 0.0, inits, inits, after_s, finished)

    unshared = {"a": job(1200.0, ((8, 60.0),), 300.0), "b": job(600.0, ((8, 60.0),), 250.0),
                "c": job(2400.0, ((8, 50.0), (8, 20.0)), 400.0)}
    comparison = Comparison({}, num_gpus=12, arrival_s={"a": 5.0, "b": 0.0, "c": 40.0}, unshared=unshared)
    bounds = comparison.mean_jct_bounds_s() or {}
    assert bounds == pytest.approx({"critical paths": 100.0, "work in turn": 505.0 / 3, "inits in turn": 425.0})
    assert comparison.mean_jct_floor_s() == pytest.approx(425.0)
    comparison.unshared = {**unshared, "c": job(2400.0, ((4, 50.0), (8, 20.0)), 400.0)}  # c's first fits beside
    assert set(comparison.mean_jct_bounds_s() or {}) == {"critical paths", "work in turn"}
    comparison.unshared = {**unshared, "c": job(2400.0, (), 400.0, finished=False)}
    assert comparison.mean_jct_bounds_s() is None and comparison.mean_jct_floor_s() is None


def test_no_policy_beats_the_inits_in_turn_on_four_jobs_sharing_twelve_gpus() -> None:
    """blog-4on12: four 8-GPU jobs on 12 GPUs. Their inits take turns, so the last job cannot
    start its steps before four inits have run; the bound binds there, and every policy's
    makespan is above it."""
    comparison = compare(load_scenario("blog-4on12"), ["rlix", "gap-ratio", "static"])
    bounds = comparison.makespan_bounds_s() or {}
    assert max(bounds, key=bounds.__getitem__) == "inits in turn"
    inits = [s for run in comparison.unshared.values() for _gpus, s in run.init_stages]
    assert len(inits) == 4 and bounds["inits in turn"] > sum(inits) + 100.0
    for policy, summary in comparison.summaries.items():
        assert summary["makespan_s"] >= bounds["inits in turn"], policy
    # The same for the mean JCT: the inits in turn bind, and no policy's mean is below them.
    jct_bounds = comparison.mean_jct_bounds_s() or {}
    assert max(jct_bounds, key=jct_bounds.__getitem__) == "inits in turn"
    assert jct_bounds["inits in turn"] > jct_bounds["critical paths"] + 60.0
    for policy, summary in comparison.summaries.items():
        assert summary["overall"]["jobs"]["mean_jct_s"] >= jct_bounds["inits in turn"], policy
    data = load_scenario("blog-4on12").model_dump(mode="json", exclude_none=True)
    data["max_time_s"] = 400.0  # cut before any job's last step: the inits bound says nothing
    cut = compare(validate_scenario(data), ["rlix"])
    assert "inits in turn" not in (cut.makespan_bounds_s() or {})


def test_compare_json_has_job_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["compare", "tiny", "--policies", "rlix,static-backfill", "--json", "--quiet",
                 "--out", str(tmp_path / "cmp")]) == 0
    figures = json.loads(capsys.readouterr().out)
    for policy in ("rlix", "static-backfill"):
        jobs = figures[policy]["jobs"]
        assert jobs["count"] == 2 and jobs["finished"] == 2 and jobs["mean_slowdown"] > 0
        assert figures[policy]["ceiling_steps_per_hour"] >= figures[policy]["steps_per_hour"] * 0.999
        bounds = figures[policy]["makespan_bounds_s"]
        assert set(bounds) >= {"critical path", "work"}  # the longest of them sets the ceiling
        steps = figures[policy]["ceiling_steps_per_hour"] * max(bounds.values()) / 3600.0
        assert steps == pytest.approx(round(steps))
        jct_bounds = figures[policy]["mean_jct_bounds_s"]
        assert set(jct_bounds) >= {"critical paths", "work in turn"}
        assert figures[policy]["mean_jct_floor_s"] == max(jct_bounds.values()) <= jobs["mean_jct_s"] * 1.001


@pytest.mark.parametrize("policies, words", [
    ("", "--policies: give at least one (known: gap-ratio, rlix"),
    ("rlix,foo,bar", "--policies: unknown foo, bar (known: "),
])
def test_bad_policies_are_named_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policies: str, words: str
) -> None:
    assert main(["compare", "tiny", "--policies", policies, "--out", str(tmp_path / "c")]) == 2
    assert words in capsys.readouterr().err and not (tmp_path / "c").exists()


def test_step_slowdowns_are_named_apart_from_the_job_slowdowns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The policies' table gives the jobs' mean and p95 slowdown (JCT over JCT alone, as
    summary.json does) beside the largest step-time slowdown: called "max_slowdown", it read
    as their max, and could be below their p95. The per-pipeline column is a step slowdown too,
    which summary.json's `slowdown` of the same pipeline is not."""
    comparison = compare(tiny(lora=200.0), ["sequential"])
    assert "max_step_slowdown" in comparison.overall_frame().columns
    assert "max_slowdown" not in comparison.overall_frame().columns
    frame = comparison.pipeline_frame()
    assert "step_slowdown" in frame.columns and "slowdown" not in frame.columns
    assert main(["compare", "tiny", "--quiet", "--policies", "rlix", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "max step slowdown" in out and "max_slowdown" not in out and "step_slowdown" in out


def test_the_policies_figures_fit_a_terminal_and_each_appears_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every figure of the policies is printed, in tables narrow enough for a terminal (one
    table of them all ran to 273 characters a line, wrapping every row)."""
    from rlix.sim.compare import OVERALL_COLUMNS

    policies = ["rlix", "gap-ratio", "static-backfill"]
    assert main(["compare", "tiny", "--quiet", "--policies", ",".join(policies), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    tables = out.split("\nceiling: ")[0]
    assert max(len(line) for line in tables.splitlines()) <= 140
    heads = [re.split(r"\s{2,}", line.strip()) for line in tables.splitlines() if line.startswith("policy ")]
    labels = [label for _key, label, _fmt in OVERALL_COLUMNS] + ["max step slowdown", "finished"]
    assert sorted(cell for head in heads for cell in head[1:]) == sorted(labels)
    for policy in policies:  # a row of each policy in each table
        assert sum(line.startswith(f"{policy} ") for line in tables.splitlines()) == len(heads)
