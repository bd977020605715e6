"""What training waits were for (rlix.runs.wait_causes), on a home worked out by hand, and on a
simulated run, where the causes must add up to the training waits the breakdown counts.

By hand: job A's home is GPUs 0-1 (its own training ran there at 20-25). A's old log-probs
request waits from 10 to 20:

    GPU 0   D rollout 9-11, offload 11-12 | C init 12-17 |
    GPU 1   B training 8-14               |              | D load 17-18.5, rollout 18.5-19, offload 19-20

10-14 is another job's training (4 s: over D's rollout and offload, and over C's init, which
explains less), 14-17 another job's init (3 s), 17-18.5 a load (1.5 s), 18.5-19 a rollout (0.5
s), 19-20 an offload (1 s). A's actor training request waits from 30 to 33 with nothing on its
home but a stage and a hold of its own (which a real run never has, and which are no cause) and
B's hold of GPU 1 at 31.5-32.5 with nothing running (between two of B's stages): 1 s held, 2 s
idle; without the allocations table that second is idle too. From
40 to 42 its own rollout rank runs there (a rollout, 2 s). A's init wait and rollout wait are
not training waits, nor is a request never granted. B, C and D wait for nothing.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from rlix.runs.breakdown import breakdown
from rlix.runs.wait_causes import CAUSES, wait_causes
from rlix.sim.cli import main


def activity() -> pd.DataFrame:
    rows = [
        ("A", "actor_train", -1, 0, "busy", "init", 0.0, 5.0),
        ("A", "actor_train", -1, 1, "busy", "init", 0.0, 5.0),
        ("A", "actor_train", -1, 0, "busy", "old_log_probs", 20.0, 25.0),
        ("A", "actor_train", -1, 1, "busy", "old_log_probs", 20.0, 25.0),
        ("A", "actor_train", -1, 0, "busy", "actor_train", 31.0, 32.0),
        ("A", "actor_infer", 0, 1, "busy", "rollout", 40.0, 45.0),
        ("B", "actor_train", -1, 1, "busy", "actor_train", 8.0, 14.0),
        ("C", "actor_train", -1, 0, "busy", "init", 12.0, 17.0),
        ("D", "actor_infer", 0, 0, "busy", "rollout", 9.0, 11.0),
        ("D", "actor_infer", 0, 0, "loading", "offload", 11.0, 12.0),
        ("D", "actor_infer", 1, 1, "loading", "load", 17.0, 18.5),
        ("D", "actor_infer", 1, 1, "busy", "rollout", 18.5, 19.0),
        ("D", "actor_infer", 1, 1, "loading", "offload", 19.0, 20.0),
        ("D", "actor_train", -1, 6, "busy", "actor_train", 50.0, 51.0),
    ]
    return pd.DataFrame(rows, columns=["pipeline_id", "cluster", "dp_rank", "gpu", "kind", "stage", "t_start", "t_end"])


def allocations() -> pd.DataFrame:
    rows = [
        ("A", "actor_train", 1, -1, 0, 30.0, 30.5),
        ("B", "actor_train", 3, -1, 1, 8.0, 14.0),
        ("B", "actor_train", 1, -1, 1, 31.5, 32.5),
        ("D", "actor_infer", 6, 1, 1, 17.0, 20.0),  # a rollout rank: its activity says more
    ]
    return pd.DataFrame(rows, columns=["pipeline_id", "cluster", "priority", "dp_rank", "gpu", "t_start", "t_end"])


def waits() -> pd.DataFrame:
    rows = [
        ("A", "actor_train", 0, 0.0, 0.0),
        ("A", "actor_train", 3, 10.0, 20.0),
        ("A", "actor_train", 1, 30.0, 33.0),
        ("A", "actor_train", 1, 40.0, 42.0),
        ("A", "actor_infer", 6, 35.0, 40.0),
        ("A", "actor_train", 3, 60.0, math.nan),
    ]
    return pd.DataFrame(rows, columns=["pipeline_id", "cluster", "priority", "t_request", "t_grant"])


def jobs() -> pd.DataFrame:
    return pd.DataFrame({"pipeline_id": ["A", "B", "C", "D"], "arrival_s": [0.0, 1.0, 2.0, 3.0]})


def test_waits_put_down_to_what_held_the_home_worked_out_by_hand() -> None:
    table = wait_causes(jobs(), waits(), activity(), by="pipeline", allocations=allocations()).set_index("group")
    assert table.index.tolist() == ["A", "B", "C", "D", "all"]
    assert table.loc["A"].to_dict() == pytest.approx(
        {"training": 4.0, "init": 3.0, "held": 1.0, "offload": 1.0, "load": 1.5, "rollout": 2.5, "idle": 2.0})
    assert (table.loc[["B", "C", "D"]] == 0).all().all()
    assert table.loc["all", "idle"] == pytest.approx(2.0 / 4)
    unheld = wait_causes(jobs(), waits(), activity(), by="pipeline").set_index("group")
    assert (unheld.loc["A", "held"], unheld.loc["A", "idle"]) == (0.0, pytest.approx(3.0))


def test_the_causes_add_up_to_the_training_waits_of_a_simulated_run(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """cpu-queue: three pipelines whose homes overlap; every training wait is put down to
    something, and the command prints the table and its JSON."""
    folder = tmp_path / "run"
    assert main(["run", "cpu-queue", "--out", str(folder), "--no-alone", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["jobs", str(folder), "--by", "pipeline", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    causes = pd.DataFrame(figures["wait_causes_s"]).set_index("group")
    groups = pd.DataFrame(figures["groups"]).set_index("group")
    assert list(causes.columns) == list(CAUSES)
    assert causes.sum(axis=1).to_dict() == pytest.approx(groups["train_wait_s"].to_dict())
    assert groups.loc["all", "train_wait_s"] > 0
    assert main(["jobs", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "by what held the job's home" in out and "offload" in out
    (folder / "activity.parquet").unlink()  # as a run with --tables jobs,waits leaves it
    assert main(["jobs", str(folder)]) == 0
    assert "what held the homes is unknown" in capsys.readouterr().out


def test_without_a_home_a_wait_has_no_cause() -> None:
    """A job whose training never ran has no home to look at: its waits count nowhere."""
    only_waits = waits().assign(pipeline_id="E")
    table = wait_causes(pd.DataFrame({"pipeline_id": ["E"], "arrival_s": [0.0]}), only_waits, activity())
    assert (table.drop(columns="group") == 0).all().all()
    groups, _ = breakdown(pd.DataFrame({"pipeline_id": ["E"], "arrival_s": [0.0], "start_s": [0.0],
                                        "finish_s": [math.nan], "alone_s": [math.nan], "queueing_s": [0.0],
                                        "jct_s": [math.nan], "slowdown": [math.nan]}), only_waits)
    assert groups["train_wait_s"].iloc[0] == pytest.approx(15.0)  # counted there, not here
