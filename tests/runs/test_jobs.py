"""Job figures (rlix.runs.jobs) on a two-job queue worked out by hand.

Two gang jobs share home GPUs 0-1 of a 2-GPU pool under `static`: A arrives at 0 and holds the
GPUs until 100; B arrives at 10, waits for A, and holds them from 100 to 150. Alone, A takes
100 s and B 50 s. By hand: A queues 0, JCT 100, slowdown 1; B queues 90, JCT 140, slowdown
2.8; two jobs finished between the first arrival (0) and the last finish (150): 48 per hour;
JCT mean 120, median 120, p95 100 + 0.95 x 40 = 138; queueing mean 45, p95 0.95 x 90 = 85.5;
slowdown mean 1.9, p95 1 + 0.95 x 1.8 = 2.71.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlix.policy import ClusterSpec, PipelineKind, PipelineSpec, Topology
from rlix.policy import events as ev
from rlix.runs import Recorder, load
from rlix.runs.folder import write_run
from rlix.runs.frames import tables_from_recorder
from rlix.runs.metrics import summary
from tests.runs.fake_run import driven

ALONE = {"A": 100.0, "B": 50.0}


def two_jobs(b_killed: bool = False) -> Recorder:
    """The two jobs; with `b_killed`, B is killed at 150 instead of finishing."""
    recorder, loop, clock = driven(Topology(1, 2), "static")
    home = (0, 1)

    def spec(pid: str) -> PipelineSpec:
        return PipelineSpec(pid, PipelineKind.FULL_FINETUNE,
                            {"actor_train": ClusterSpec(1, home), "actor_infer": ClusterSpec(1, home)}, home=home)

    def at(t: float, *events: ev.Event) -> None:
        clock.now = t
        for event in events:
            loop.send(event)

    at(0.0, ev.PipelineRegistered(0.0, spec("A")), ev.PipelineAdmitted(0.0, "A"),
       ev.ClusterRequested(0.0, "A", "actor_train", 0))
    at(10.0, ev.PipelineRegistered(10.0, spec("B")), ev.PipelineAdmitted(10.0, "B"),
       ev.ClusterRequested(10.0, "B", "actor_train", 0))
    at(100.0, ev.ClusterReleased(100.0, "A", "actor_train"), ev.PipelineRemoved(100.0, "A"))
    at(150.0, ev.ClusterReleased(150.0, "B", "actor_train"), ev.PipelineRemoved(150.0, "B", failed=b_killed))
    # Each init's wait from its request to its grant, as a driver's host records it (the
    # summary's waits agree with the log's grants then, as replay, check and jobs ask).
    recorder.add_wait("A", "actor_train", 0, 0.0, 0.0)
    recorder.add_wait("B", "actor_train", 0, 10.0, 100.0)
    recorder.finish(150.0)
    return recorder


def test_job_figures_by_hand() -> None:
    figures = summary(tables_from_recorder(two_jobs()), alone_s=ALONE)
    a, b = figures["pipelines"]["A"], figures["pipelines"]["B"]
    assert (a["arrival_s"], a["start_s"], a["queueing_s"], a["finish_s"], a["jct_s"], a["slowdown"]) == (
        0.0, 0.0, 0.0, 100.0, 100.0, 1.0)
    assert (b["arrival_s"], b["start_s"], b["queueing_s"], b["finish_s"], b["jct_s"]) == (10.0, 100.0, 90.0, 150.0, 140.0)
    assert b["slowdown"] == pytest.approx(2.8)
    jobs = figures["overall"]["jobs"]
    expected = {"count": 2, "finished": 2, "failed": 0, "experiments_per_hour": 48.0, "mean_jct_s": 120.0, "p50_jct_s": 120.0,
                "p95_jct_s": 138.0, "mean_queueing_s": 45.0, "p50_queueing_s": 45.0, "p95_queueing_s": 85.5, "mean_slowdown": 1.9,
                "p95_slowdown": 2.71}
    assert jobs.keys() == expected.keys()
    for key, value in expected.items():
        assert jobs[key] == pytest.approx(value), key


def test_a_killed_job_ends_but_never_finishes(tmp_path: Path) -> None:
    """B killed at 150: it left the pool then (finish_s), but it has no JCT or slowdown, and
    only A counts as an experiment done: one in the 100 s from the first arrival to A's end."""
    figures = summary(tables_from_recorder(two_jobs(b_killed=True)), alone_s=ALONE)
    b = figures["pipelines"]["B"]
    assert (b["finish_s"], b["jct_s"], b["slowdown"]) == (150.0, None, None)
    jobs = figures["overall"]["jobs"]
    assert (jobs["count"], jobs["finished"], jobs["failed"]) == (2, 1, 1)
    assert jobs["experiments_per_hour"] == pytest.approx(36.0)
    assert (jobs["mean_jct_s"], jobs["mean_slowdown"]) == (100.0, 1.0)
    folder = write_run(two_jobs(b_killed=True), tmp_path / "run", scenario_yaml="name: x\n", plots=False,
                       alone_s=ALONE)
    assert summary(load(folder).tables(), alone_s=ALONE)["overall"]["jobs"] == jobs  # the same read back
    from rlix.runs.breakdown import breakdown

    groups, _ = breakdown(load(folder).jobs, None, by="name")
    assert groups.set_index("group")["finished"].to_dict() == {"A": 1, "B": 0, "all": 1}
    assert groups["run_s"].fillna(-1.0).tolist() == [100.0, -1.0, 100.0]  # B's is no run to completion


def test_without_alone_times_slowdown_is_unknown() -> None:
    figures = summary(tables_from_recorder(two_jobs()))
    assert figures["pipelines"]["B"]["alone_s"] is None and figures["pipelines"]["B"]["slowdown"] is None
    assert figures["overall"]["jobs"]["mean_slowdown"] is None
    assert figures["overall"]["jobs"]["mean_jct_s"] == pytest.approx(120.0)


def test_the_jobs_table_is_written_and_read_back(tmp_path: Path) -> None:
    folder = write_run(two_jobs(), tmp_path / "run", scenario_yaml="name: x\n", plots=False, alone_s=ALONE)
    jobs = load(folder).jobs.set_index("pipeline_id")
    assert list(jobs.index) == ["A", "B"]
    assert jobs.loc["B", "queueing_s"] == pytest.approx(90.0)
    assert jobs.loc["B", "slowdown"] == pytest.approx(2.8)


def test_queue_length_and_the_job_plot(tmp_path: Path) -> None:
    from rlix.runs.jobs_plot import plot_jobs, queue_length

    figures = summary(tables_from_recorder(two_jobs()), alone_s=ALONE)
    times, waiting = queue_length(figures["pipelines"])
    # A arrives and starts at 0; B arrives at 10 and starts at 100
    assert times.tolist() == [0.0, 0.0, 10.0, 100.0] and waiting.tolist() == [1, 0, 1, 0]
    path = plot_jobs({"static": figures}, tmp_path / "jobs.png")
    assert path.stat().st_size > 10_000
