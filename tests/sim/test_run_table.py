"""rlix-sim run's printed tables, as a newcomer reads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlix.sim.cli import main


def test_the_run_table_names_the_staleness_bound_and_gives_it_per_adapter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pipelines' table heads its staleness column max_staleness (it read k) and gives a
    multi-LoRA pipeline's bounds as adapter=bound, not a Python dict."""
    assert main(["run", "cpu-demo", "--no-alone", "--out", str(tmp_path / "run")]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("pipeline "))
    assert "max_staleness" in header.split()
    lora = next(line for line in lines if line.startswith("lora "))
    assert "a0=0 a1=1" in lora and "{" not in lora


def _summary(ids: list[str]) -> dict[str, object]:
    """A run's summary.json with one pipeline per id: job i took 100 + i s and was preempted i times."""
    pipelines = {
        pid: {"kind": "full_finetune", "max_staleness": 1, "steps": 2, "steps_per_hour": 10.0,
              "mean_step_time_s": 50.0, "p95_step_time_s": 60.0, "busy_share": 0.5,
              "preemptions": i, "queueing_s": 1.0, "jct_s": 100.0 + i}
        for i, pid in enumerate(ids)
    }
    jobs = {"count": len(ids), "finished": len(ids), "mean_jct_s": 123.4, "p50_jct_s": 120.0,
            "p95_jct_s": 150.0, "mean_queueing_s": 1.0, "p95_queueing_s": 2.0,
            "mean_slowdown": 1.1, "p95_slowdown": 1.3}
    return {"policy": "rlix", "num_gpus": 8, "makespan_s": 1000.0, "finished": True,
            "overall": {"steps": 2 * len(ids), "steps_per_hour": 1.0, "busy_share": 0.5,
                        "idle_share": 0.5, "jobs": jobs},
            "pipelines": pipelines}


def test_a_stream_of_many_jobs_prints_one_row_per_group_and_the_jobs_figures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Hundreds of jobs (lab-day-1024 has 1,044) print one row per template, with the group's
    job count, summed steps and mean JCT, not a row per job; the JCT line comes first."""
    from rlix.sim.report import MAX_PIPELINE_ROWS, print_run

    ids = [f"math-{n}" for n in range(MAX_PIPELINE_ROWS)] + [f"agent-{n}" for n in range(10)]
    print_run("many", _summary(ids), run_dir="runs/many")
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("jobs: 50 (50 finished), mean JCT 123 s (p50 120 s, p95 150 s)")
    assert any("runs/many/summary.json" in line for line in lines)
    header = next(line for line in lines if line.startswith("group "))
    rows = lines[lines.index(header) + 1:]
    assert [row.split()[0] for row in rows] == ["math", "agent"]
    math = dict(zip(header.split(), rows[0].split(), strict=True))
    assert math["jobs"] == "40" and math["steps"] == "80"
    assert math["preemptions"] == f"{sum(range(40)):,}"
    assert math["jct_s"] == f"{100 + sum(range(40)) / 40:,.0f}"


def test_a_few_pipelines_keep_a_row_each(capsys: pytest.CaptureFixture[str]) -> None:
    from rlix.sim.report import print_run

    print_run("few", _summary(["math-0", "math-1", "agent"]))
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("pipeline "))
    assert [row.split()[0] for row in lines[lines.index(header) + 1:]] == ["math-0", "math-1", "agent"]


def test_compare_groups_its_pipeline_table_per_policy() -> None:
    import pandas as pd

    from rlix.sim.report import grouped_pipelines

    frame = pd.DataFrame({"policy": ["rlix"] * 3 + ["static"] * 3,
                          "pipeline_id": ["a-0", "a-1", "b-0"] * 2,
                          "steps": [1, 2, 3, 4, 5, 6],
                          "mean_step_s": [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]})
    table = grouped_pipelines(frame, "pipeline_id", by=("policy",))
    assert table.to_dict("records") == [
        {"policy": "rlix", "pipeline_id": "a", "jobs": 2, "steps": 3, "mean_step_s": 2.0},
        {"policy": "rlix", "pipeline_id": "b", "jobs": 1, "steps": 3, "mean_step_s": 5.0},
        {"policy": "static", "pipeline_id": "a", "jobs": 2, "steps": 9, "mean_step_s": 8.0},
        {"policy": "static", "pipeline_id": "b", "jobs": 1, "steps": 6, "mean_step_s": 11.0},
    ]


def test_a_grouped_column_of_nulls_stays_null() -> None:
    """A compare without alone runs has no unshared rate: its grouped mean is null, not an error."""
    import pandas as pd

    from rlix.sim.report import grouped_pipelines

    frame = pd.DataFrame({"pipeline_id": ["a-0", "a-1"], "alone_step_s": [None, None]})
    table = grouped_pipelines(frame, "pipeline_id")
    assert table["jobs"].tolist() == [2] and table["alone_step_s"].isna().all()
