"""A job that arrives long after the pool is empty (a job log in epoch seconds, a typo): the
simulator jumps the empty stretch instead of ticking the core every 30 s through it (10^9 s
took minutes and wrote millions of Tick lines), and the run still ends whole and replays."""

from __future__ import annotations

import json
from pathlib import Path

from rlix.runs.verify import replay
from rlix.scenarios import load_scenario
from rlix.scenarios.load import validate_scenario
from rlix.sim import simulate
from rlix.sim.simulation import TICK_S


def test_an_empty_stretch_before_a_far_arrival_costs_no_ticks(tmp_path: Path) -> None:
    data = load_scenario("tiny").model_dump(mode="json", exclude_none=True)
    data["pipelines"][1]["arrival_s"] = 1.0e9
    result = simulate(validate_scenario(data), out=tmp_path / "run", plots=False)
    assert result.summary["finished"] is True and result.summary["makespan_s"] > 1.0e9
    ticks = [line for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines() if '"Tick"' in line]
    assert 0 < len(ticks) < 20
    assert json.loads(ticks[-1])["event"]["now"] % TICK_S == 0.0  # the same phase as before the gap
    assert replay(tmp_path / "run").identical


def test_a_job_due_after_the_cut_is_not_in_the_run(tmp_path: Path) -> None:
    """A run cut before a job arrives never registers it: its summary, tables and figures are
    those of the jobs that arrived, as the folder read back says (it once listed the job as
    waiting from 0, which made the whole run 'jobs waiting')."""
    from rlix.runs import load

    data = load_scenario("tiny").model_dump(mode="json", exclude_none=True)
    data["pipelines"][1]["arrival_s"] = 1.0e6
    data["max_time_s"] = 200.0
    result = simulate(validate_scenario(data), out=tmp_path / "run", plots=False)
    arrived = [data["pipelines"][0]["id"]]
    assert sorted(result.summary["pipelines"]) == arrived
    assert result.summary["overall"]["jobs"]["count"] == 1
    waiting = result.summary["overall"]["while_waiting"]
    assert waiting is None or waiting["waiting_s"] < 200.0
    run = load(tmp_path / "run")
    assert sorted(run.jobs["pipeline_id"]) == arrived
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["overall"] == result.summary["overall"]
