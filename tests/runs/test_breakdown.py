"""Where jobs' time goes (rlix.runs.breakdown, `rlix-sim jobs`), on jobs worked out by hand.

Three jobs: `m-0` (arrives 0, starts 0, finishes 100, alone 80), `m-1` (arrives 50, starts 70,
finishes 250, alone 80) and `big` (arrives 120, starts 120, still running, alone 300). Their
waits: `m-0` init 0, old log-probs 4 and 6, a rollout wait of 50 (not a training wait); `m-1`
init 20, actor training 10; `big` init 0, value 30, and a value request not granted yet.

By hand, grouped by name: `m` has 2 jobs, both finished, alone 80, queueing (0 + 20) / 2 = 10,
run (100 + 180) / 2 = 140, JCT (100 + 200) / 2 = 150, excess (20 + 120) / 2 = 70, slowdown
(1.25 + 2.5) / 2 = 1.875, training waits (10 + 10) / 2 = 10. `big` has no finish, so no run,
JCT, excess or slowdown: m holds 100% of the time lost (140 of 140). Over all three: queueing
20 / 3, JCT and excess the means of the finished (150, 70), training waits (10 + 10 + 30) / 3.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from rlix.runs.breakdown import breakdown, group_of, train_waits
from rlix.runs.folder import write_run
from rlix.sim.cli import main
from tests.runs.test_jobs import ALONE, two_jobs

NAN = math.nan


def jobs() -> pd.DataFrame:
    rows = [("m-0", 0.0, 0.0, 100.0, 80.0), ("m-1", 50.0, 70.0, 250.0, 80.0), ("big", 120.0, 120.0, NAN, 300.0)]
    frame = pd.DataFrame(rows, columns=["pipeline_id", "arrival_s", "start_s", "finish_s", "alone_s"])
    frame["queueing_s"] = frame.start_s - frame.arrival_s
    frame["jct_s"] = frame.finish_s - frame.arrival_s
    frame["slowdown"] = frame.jct_s / frame.alone_s
    return frame


def waits() -> pd.DataFrame:
    rows = [
        ("m-0", "actor_train", 0, 0.0, 0.0),
        ("m-0", "actor_train", 3, 10.0, 14.0),
        ("m-0", "actor_train", 3, 40.0, 46.0),
        ("m-0", "actor_infer", 6, 0.0, 50.0),
        ("m-1", "actor_train", 0, 50.0, 70.0),
        ("m-1", "actor_train", 1, 100.0, 110.0),
        ("big", "actor_train", 0, 120.0, 120.0),
        ("big", "critic", 5, 150.0, 180.0),
        ("big", "critic", 5, 200.0, NAN),
    ]
    return pd.DataFrame(rows, columns=["pipeline_id", "cluster", "priority", "t_request", "t_grant"])


def test_groups_by_name_worked_out_by_hand() -> None:
    groups, stages = breakdown(jobs(), waits())
    assert groups.group.tolist() == ["m", "big", "all"]
    m, big, total = (groups.iloc[i] for i in range(3))
    assert (m.jobs, m.finished, m.alone_s, m.queueing_s, m.run_s, m.jct_s, m.excess_s) == (2, 2, 80, 10, 140, 150, 70)
    assert m.slowdown == pytest.approx(1.875) and m.train_wait_s == pytest.approx(10.0)
    assert m.excess_share == pytest.approx(1.0)
    assert big.jobs == 1 and big.finished == 0 and math.isnan(big.jct_s) and math.isnan(big.excess_s)
    assert big.train_wait_s == pytest.approx(30.0) and math.isnan(big.excess_share)
    assert (total.jobs, total.finished, total.jct_s, total.excess_s) == (3, 2, 150, 70)
    assert total.queueing_s == pytest.approx(20 / 3) and total.train_wait_s == pytest.approx(50 / 3)
    assert total.excess_share == pytest.approx(1.0)
    assert stages.columns.tolist() == ["group", "init", "actor_train", "old_log_probs", "value"]
    assert stages.set_index("group").loc["m"].tolist() == [10.0, 5.0, 5.0, 0.0]
    assert stages.set_index("group").loc["all", "value"] == pytest.approx(10.0)


def test_rollout_and_ungranted_requests_are_no_training_wait() -> None:
    table = train_waits(waits())
    assert "rollout" not in table.columns
    assert table.loc["big", "value"] == 30.0 and table.loc["m-0", "old_log_probs"] == 10.0


def test_groups_by_arrival_and_by_pipeline() -> None:
    groups, _ = breakdown(jobs(), waits(), by="arrival", bin_s=100.0)
    assert groups.group.tolist() == ["0-100 s", "100-200 s", "all"]
    assert groups.jobs.tolist() == [2, 1, 3]
    hours, _ = breakdown(jobs(), waits(), by="arrival")
    assert hours.group.tolist() == ["0-1 h", "all"]
    each, _ = breakdown(jobs(), waits(), by="pipeline")
    assert each.group.tolist() == ["m-0", "m-1", "big", "all"]
    assert each.set_index("group").loc["m-1", "excess_share"] == pytest.approx(120 / 140)
    with pytest.raises(ValueError, match="bin_s"):
        breakdown(jobs(), waits(), by="arrival", bin_s=0)


def test_arrival_bins_past_a_million_seconds_keep_their_own_labels() -> None:
    """Two jobs 7 s apart on day 15, in 5-s bins: :g's six digits labelled both bins
    1.29601e+06-1.29601e+06 s, and the groups merged."""
    late = jobs().assign(arrival_s=[1_296_000.0, 1_296_007.0, 1_296_014.0], start_s=[1_296_000.0] * 3)
    groups, _ = breakdown(late.assign(queueing_s=0.0, jct_s=1.0, finish_s=late.arrival_s + 1.0), waits(),
                          by="arrival", bin_s=5.0)
    assert groups.group.tolist() == ["1296000-1296005 s", "1296005-1296010 s", "1296010-1296015 s", "all"]


@pytest.mark.parametrize(("pipeline_id", "group"), [
    ("grpo7b-math-12", "grpo7b-math"), ("ft-a", "ft-a"), ("x-1-2", "x-1"), ("-3", "-3"), ("job", "job"),
])
def test_a_stream_job_groups_under_its_template(pipeline_id: str, group: str) -> None:
    assert group_of(pipeline_id) == group


def test_the_command_reads_a_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_run(two_jobs(), tmp_path / "run", scenario_yaml="name: x\n", plots=False, alone_s=ALONE)
    assert main(["jobs", str(folder), "--by", "pipeline"]) == 0
    out = capsys.readouterr().out
    assert "2 jobs, policy static" in out
    row_b = next(line for line in out.splitlines() if line.startswith("B "))
    # B: alone 50, queueing 90, run 50, JCT 140, excess 90 (all of the excess), slowdown 2.8
    assert row_b.split()[1:10] == ["1", "1", "50", "90", "50", "140", "90", "100%", "2.80"]
    assert main(["jobs", str(folder), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert [g["group"] for g in figures["groups"]] == ["A", "B", "all"]
    assert figures["groups"][2]["jct_s"] == pytest.approx(120.0)


def test_a_folder_that_is_not_a_run_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlix-sim: error:") and len(err.strip().splitlines()) == 1


def test_a_run_without_alone_times_says_why_excess_is_missing(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_run(two_jobs(), tmp_path / "run", scenario_yaml="name: x\n", plots=False)
    assert main(["jobs", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "no times alone in this run" in out
    row_b = next(line for line in out.splitlines() if line.startswith("B "))
    assert row_b.split()[3:8] == ["-", "90", "50", "140", "-"]  # alone, queueing, run, JCT, excess


def test_without_a_waits_table_training_waits_are_unknown() -> None:
    groups, stages = breakdown(jobs(), None)
    assert groups.train_wait_s.isna().all() and groups.rollout_wait_s.isna().all() and stages.columns.tolist() == ["group"]
    assert groups.set_index("group").loc["m", "excess_s"] == 70  # the rest stands


def test_rollout_waits_by_group() -> None:
    # m-0 waited 12 s for a rollout rank, big 30; m-1 is not in the series: it had none.
    rollout_waits = pd.Series({"m-0": 12.0, "big": 30.0, "gone": 99.0})
    groups, _ = breakdown(jobs(), waits(), rollout_waits=rollout_waits)
    by_group = groups.set_index("group")["rollout_wait_s"]
    assert by_group.to_dict() == pytest.approx({"m": 6.0, "big": 30.0, "all": 14.0})
    assert groups.set_index("group").loc["m", "train_wait_s"] == pytest.approx(10.0)  # apart from it


def test_the_command_reports_rollout_waits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rlix.runs.rankless import open_rollouts, rankless_by_job
    from rlix.sim.api import simulate

    run = simulate("tiny", "rlix", seed=0, out=tmp_path / "tiny", plots=False)
    assert main(["jobs", str(run.run_dir), "--by", "pipeline", "--json"]) == 0
    groups = {g["group"]: g for g in json.loads(capsys.readouterr().out)["groups"]}
    spans = open_rollouts(run.run_dir / "events.jsonl", run.summary["makespan_s"])
    expected = rankless_by_job(spans, pd.read_parquet(run.run_dir / "allocations.parquet"))["rankless_s"]
    for pipeline_id, seconds in expected.items():
        assert groups[pipeline_id]["rollout_wait_s"] == pytest.approx(seconds)
        assert 0 <= seconds <= groups[pipeline_id]["run_s"]


def test_a_log_cut_short_is_refused_not_read_for_rollout_waits(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The rollout waits come from events.jsonl: cut short, it left rollouts open to the
    makespan and lost the later ones, and the command printed those figures (exit 0)."""
    from rlix.sim.api import simulate

    run = simulate("tiny", "rlix", seed=0, out=tmp_path / "tiny", plots=False)
    events = run.run_dir / "events.jsonl"
    lines = events.read_text().splitlines()
    events.write_text("\n".join(lines[: len(lines) // 2]) + "\n")
    assert main(["jobs", str(run.run_dir)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"rlix-sim: error: {events}, line {len(lines) // 2}: ")
    assert "the log was cut short" in captured.err and captured.err.count("\n") == 1


def test_no_share_when_no_job_lost_time() -> None:
    faster = jobs().assign(alone_s=[150.0, 300.0, 300.0])  # m-0 -50, m-1 -100
    groups, _ = breakdown(faster, waits())
    assert groups.set_index("group").loc["all", "excess_s"] == -75
    assert groups.excess_share.isna().all()


def test_shares_count_only_the_time_lost() -> None:
    # m-0 loses 20 s (JCT 100, alone 80), m-1 gains 100 (JCT 200, alone 300): the signed excesses
    # sum to -80, of which no share means anything; m-0 lost all the time that was lost.
    mixed = jobs().assign(alone_s=[80.0, 300.0, 300.0])
    groups, _ = breakdown(mixed, waits())
    assert groups.set_index("group").loc["m", "excess_s"] == -40
    assert groups.set_index("group").loc["m", "excess_share"] == pytest.approx(1.0)
    each, _ = breakdown(mixed, waits(), by="pipeline")
    shares = each.set_index("group")["excess_share"]
    assert shares["m-0"] == pytest.approx(1.0) and shares["m-1"] == 0.0 and math.isnan(shares["big"])
    assert shares["all"] == pytest.approx(1.0)


def test_a_run_that_kept_no_waits_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_run(two_jobs(), tmp_path / "run", scenario_yaml="name: x\n", plots=False, alone_s=ALONE)
    (folder / "waits.parquet").unlink()  # as a run with --tables jobs,... leaves it
    assert main(["jobs", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "no waits table in this run" in out and "140" in out


def _named_all(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(pipeline_id=frame["pipeline_id"].replace("big", "all"))


def test_a_group_named_all_keeps_its_own_row_beside_the_overall_one() -> None:
    groups, stages = breakdown(_named_all(jobs()), _named_all(waits()))
    assert groups.group.tolist() == ["m", "all", "all jobs"]
    table = groups.set_index("group")
    assert table.loc["all", "jobs"] == 1 and table.loc["all", "train_wait_s"] == pytest.approx(30.0)
    assert table.loc["all jobs", "jobs"] == 3 and table.loc["all jobs", "train_wait_s"] == pytest.approx(50 / 3)
    assert stages.group.tolist() == ["m", "all", "all jobs"]
    by_stage = stages.set_index("group")
    assert by_stage.loc["all", "value"] == pytest.approx(30.0)  # big's alone, not mixed with everyone's
    assert by_stage.loc["all jobs", "value"] == pytest.approx(10.0)
    assert by_stage.loc["all jobs", "init"] == pytest.approx(20 / 3)
    # With no group named "all", the overall row keeps its usual label.
    assert breakdown(jobs(), waits())[1].group.tolist() == ["m", "big", "all"]


def test_the_command_shows_a_job_named_all_and_the_overall_row_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlix.scenarios import load_scenario
    from rlix.scenarios.load import validate_scenario
    from rlix.sim import simulate

    data = load_scenario("tiny").model_dump(mode="json", exclude_none=True)
    data["pipelines"][0]["id"] = "all"
    simulate(validate_scenario(data), out=tmp_path / "run", plots=False)
    assert main(["jobs", str(tmp_path / "run"), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    for table in ("groups", "stage_waits_s", "wait_causes_s", "rank_moves"):
        assert [row["group"] for row in figures[table]][::2] == ["all", "all jobs"], table
    stages = {row["group"]: row for row in figures["stage_waits_s"]}
    other = next(g for g in stages if g not in ("all", "all jobs"))
    for stage in (c for c in stages["all"] if c != "group"):
        # The overall row is the mean of the two jobs' rows, each of which keeps its own.
        assert stages["all jobs"][stage] == pytest.approx((stages["all"][stage] + stages[other][stage]) / 2), stage
    assert any(stages["all"][c] != stages[other][c] for c in stages["all"] if c != "group")


def test_the_init_wait_is_the_wait_to_start_less_the_weights_read_first(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """rlix's jobs read their weights before they ask for their init's GPUs, so the stage
    table's init column is each job's queueing less its prefetch_s, and the command says so
    rather than calling it the wait to start."""
    from rlix.sim import simulate

    simulate("tiny", "rlix", seed=0, out=tmp_path / "tiny", plots=False)
    pipelines = json.loads((tmp_path / "tiny" / "summary.json").read_text())["pipelines"]
    assert all(figures["prefetch_s"] > 0 for figures in pipelines.values())
    assert main(["jobs", str(tmp_path / "tiny"), "--by", "pipeline", "--json"]) == 0
    stages = {row["group"]: row for row in json.loads(capsys.readouterr().out)["stage_waits_s"]}
    for pid, figures in pipelines.items():
        assert stages[pid]["init"] == pytest.approx(figures["queueing_s"] - figures["prefetch_s"]), pid
    assert main(["jobs", str(tmp_path / "tiny")]) == 0
    out = capsys.readouterr().out
    assert "init's is the wait to start)" not in out and "less any prefetch_s" in out


def test_an_emptied_jobs_table_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A jobs table with its rows deleted was a ZeroDivisionError traceback (the rank moves' means
    per job)."""
    folder = write_run(two_jobs(), tmp_path / "run", scenario_yaml="name: x\n", plots=False, alone_s=ALONE)
    table = folder / "jobs.parquet"
    pd.read_parquet(table).iloc[:0].to_parquet(table)
    assert main(["jobs", str(folder)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"rlix-sim: error: {folder}: its jobs table has no rows: no job to show\n"


def test_a_job_due_after_the_run_was_cut_is_not_in_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A simulated run cut before a job's arrival does not list it (it never registered). Its
    folders once did, with arrival_s 0.0: `--by arrival` put it in the first bin, its zero waits
    pulled the means down (lab-day cut at 2,000 s: 273 jobs, 264 "arrived" in the first 10 min,
    a mean training wait of 1 s against 15 s over the 13 that arrived) and the comparison's
    queue length counted it as waiting from 0. Such a folder (written here as they were, with
    every scenario pipeline's spec) reads with a null arrival for it, and the command leaves it
    out."""
    from rlix.runs import check
    from rlix.runs.folder import write_run
    from rlix.scenarios import load_scenario
    from rlix.scenarios.load import validate_scenario
    from rlix.sim import simulate

    data = load_scenario("tiny").model_dump(mode="json", exclude_none=True)
    data["max_time_s"] = 60.0
    data["pipelines"][1]["arrival_s"] = 90.0
    late = data["pipelines"][1]["id"]
    scenario = validate_scenario(data)
    result = simulate(scenario, "rlix", seed=0, out=tmp_path / "cut", plots=False)
    figures = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert late not in figures["pipelines"] and figures["overall"]["jobs"]["count"] == 1
    assert main(["jobs", str(tmp_path / "cut")]) == 0
    assert "1 jobs, policy" in capsys.readouterr().out

    every_spec = {**scenario.pipeline_specs("rlix"), **result.specs}
    # Unfinished, as the simulator said of a cut run then too (the log ends with ft running).
    write_run(result.recorder, tmp_path / "old", scenario_yaml=scenario.to_yaml(), specs=every_spec, plots=False,
              extra_summary={"finished": False})
    figures = json.loads((tmp_path / "old" / "summary.json").read_text())
    assert figures["pipelines"][late]["arrival_s"] is None
    assert figures["overall"]["jobs"]["count"] == 2
    assert pd.read_parquet(tmp_path / "old" / "jobs.parquet").set_index("pipeline_id")["arrival_s"].isna()[late]
    assert check(tmp_path / "old") is not None  # a row of no arrival is no stranger to its log
    assert main(["jobs", str(tmp_path / "old"), "--by", "arrival", "--bin-s", "30", "--json"]) == 0
    groups = json.loads(capsys.readouterr().out)["groups"]
    assert [(g["group"], g["jobs"]) for g in groups] == [("0-30 s", 1), ("all", 1)]
    assert main(["jobs", str(tmp_path / "old")]) == 0
    assert "1 jobs (1 more had not arrived when the run ended: left out)" in capsys.readouterr().out


def test_a_cut_run_without_alone_times_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run cut short with its alone runs simulated has no time alone that ended in time; the
    note blamed --no-alone alone."""
    from rlix.scenarios import load_scenario
    from rlix.scenarios.load import validate_scenario
    from rlix.sim import simulate

    cut = load_scenario("tiny").model_dump(mode="json", exclude_none=True) | {"max_time_s": 30.0}
    simulate(validate_scenario(cut), "rlix", seed=0, out=tmp_path / "cut", plots=False, alone=True)
    assert main(["jobs", str(tmp_path / "cut")]) == 0
    assert "did not end within the time a run cut short gave its job" in capsys.readouterr().out


def test_jobs_that_never_started_are_noted_not_left_silently_out(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """blog-4on12 cut at 30 s: three jobs still wait for their inits' GPUs. The means cover the
    one that started (queueing 8 s); the note says the others waited all the run so far."""
    from rlix.sim import simulate
    from rlix.sim.api import resolve_scenario

    simulate(resolve_scenario("blog-4on12", max_time_s=30.0), out=tmp_path / "cut", plots=False, alone=False)
    assert main(["jobs", str(tmp_path / "cut")]) == 0
    out = capsys.readouterr().out
    assert ("(3 jobs (job1, job2, job3) had not started when the run ended at 30 s, after waiting 30 s on "
            "average so far: left out of queueing_s") in out
    assert main(["jobs", str(tmp_path / "cut"), "--json"]) == 0  # the JSON is the figures only
    assert "had not started" not in capsys.readouterr().out
