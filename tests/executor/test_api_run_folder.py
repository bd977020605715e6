"""A run driven through the Python API keeps a run folder like `rlix-exec run`'s
(`Client.write_run`): its API pipelines' steps and gang waits are in the tables, `rlix-sim check`
holds and `replay` is identical, and a pipeline still registered makes the run unfinished. A
program pipeline runs beside them, so both kinds share one record."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest

from rlix.executor.api import Client
from rlix.runs.verify import check, replay
from tests.executor.api_support import Handler, register
from tests.executor.test_orchestrator import synthetic


def _steps(client: Client, pid: str, num_steps: int) -> None:
    for step in range(num_steps):
        client.request(pid, "actor_train", 1)
        time.sleep(0.1)
        client.release_and_request(pid, "actor_train", "actor_infer", 6, estimate=8.0)
        for remaining in (4.0, 0.0):
            time.sleep(0.1)
            client.progress(pid, remaining)
        client.release(pid, "actor_infer")
        client.train_step_finished(pid, step + 1)


def test_an_api_run_keeps_a_folder_that_checks_and_replays(client: Client, tmp_path: Path) -> None:
    client.launch(synthetic("prog", train=(3,), steps=2))
    with_handler = register(client, "api", (0, 1, 2, 3), (0, 1), Handler.remote())  # type: ignore[attr-defined]
    without = register(client, "api", (0, 1, 2, 3), (2,))
    _steps(client, with_handler, 2)
    _steps(client, without, 1)
    client.remove_pipeline(with_handler)
    assert client.wait_done(timeout_s=120)["prog"]["status"] == "finished"

    out = client.write_run(tmp_path / "run", plots=False)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["api_pipelines"] == sorted([with_handler, without])
    assert summary["finished"] is False and without in summary["stop_reason"]  # still registered
    steps = pd.read_parquet(out / "steps.parquet")
    counted = steps.groupby("pipeline_id").size().to_dict()
    assert counted == {"prog": 2, with_handler: 2, without: 1}
    mine = steps[steps["pipeline_id"] == with_handler].sort_values("step")
    assert list(mine["step"]) == [0, 1] and (mine["t_end"] > mine["t_start"]).all()
    assert mine["t_start"].iloc[1] == pytest.approx(mine["t_end"].iloc[0])  # one step after the other
    waits = pd.read_parquet(out / "waits.parquet")
    assert (waits[(waits["pipeline_id"] == with_handler)]["cluster"] == "actor_train").sum() == 2
    assert summary["pipelines"][with_handler]["steps"] == 2

    check(out)  # the tables agree with the log, the API pipelines asked for no trajectory
    assert replay(out).identical
