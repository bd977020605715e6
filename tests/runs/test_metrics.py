"""summary(): figures of a hand-made recorder worked out by hand, and of a real two-pipeline run
against a brute-force count of what every GPU did in every second."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from rlix.policy import ClusterSpec, PipelineKind, PipelineSpec, PolicyConfig, Topology
from rlix.runs import Recorder
from rlix.runs.frames import tables_from_recorder
from rlix.runs.metrics import summary
from tests.runs.fake_run import two_pipeline_run


def hand_made() -> tuple[Recorder, dict[str, PipelineSpec]]:
    """2 GPUs, 100 s. p0 holds GPU 0 all along: busy 10-40, loading 35-45 (5 s of it not busy).
    Its activity on GPU 1, which it never held, does not count."""
    recorder = Recorder(Topology(1, 2), "rlix", PolicyConfig())
    recorder.allocations.append(("p0", "actor_train", 1, -1, 0, 0.0, 100.0))
    recorder.add_activity("p0", "actor_train", -1, [0], "busy", "actor_train", 10.0, 40.0)
    recorder.add_activity("p0", "actor_train", -1, [0], "loading", "load", 35.0, 45.0)
    recorder.add_activity("p0", "actor_train", -1, [1], "busy", "actor_train", 0.0, 10.0)
    for step, (t0, t1) in enumerate(((0.0, 20.0), (20.0, 60.0))):
        recorder.add_step({"pipeline_id": "p0", "adapter": "base", "step": step, "t_start": t0, "t_end": t1})
    recorder.add_wait("p0", "actor_train", 1, 0.0, 0.0)
    recorder.add_wait("p0", "actor_train", 1, 20.0, 30.0)
    recorder.add_rollouts({
        "pipeline_id": ["p0"] * 3, "adapter": ["base"] * 3, "trajectory_id": [0, 1, 1],
        "step_consumed": [0] * 3, "weight_version": [0] * 3, "prompt_tokens": [5] * 3,
        "response_tokens": [100, 40, 300], "t_start": [0.0, 0.0, 5.0], "t_end": [5.0, 5.0, 15.0],
        "preemptions": [0, 1, 1], "status": ["completed", "requeued", "completed"],
        "dp_rank": [0] * 3, "recomputed_tokens": [0, 0, 40],
    })
    recorder.finish(100.0)
    spec = PipelineSpec("p0", PipelineKind.FULL_FINETUNE,
                        {"actor_infer": ClusterSpec(1, (0, 1)), "actor_train": ClusterSpec(1, (0,))},
                        max_staleness=2)
    return recorder, {"p0": spec}


def test_hand_made_figures() -> None:
    recorder, specs = hand_made()
    result = summary(recorder, specs)
    assert (result["policy"], result["num_gpus"], result["makespan_s"]) == ("rlix", 2, 100.0)
    overall, p0 = result["overall"], result["pipelines"]["p0"]
    assert (p0["kind"], p0["max_staleness"]) == ("full_finetune", 2)
    # The pipeline: shares of the 100 GPU-seconds it held.
    assert p0["busy_share"] == pytest.approx(0.30)
    assert p0["loading_share"] == pytest.approx(0.05)
    assert p0["idle_share"] == pytest.approx(0.65)
    assert p0["held_share"] == pytest.approx(0.5)
    assert p0["steps_per_hour_per_gpu"] == pytest.approx(2 / (100 / 3600))
    assert p0["tokens_per_gpu_hour"] == pytest.approx(400 / (100 / 3600))
    # The pool: 200 GPU-seconds.
    assert overall["busy_share"] == pytest.approx(0.15)
    assert overall["loading_share"] == pytest.approx(0.025)
    assert overall["idle_share"] == pytest.approx(0.825)
    assert overall["steps_per_hour"] == pytest.approx(72.0)
    assert overall["steps_per_hour_per_gpu"] == pytest.approx(36.0)
    assert overall["tokens_per_gpu_hour"] == pytest.approx(400 / (200 / 3600))
    for scope in (overall, p0):
        assert scope["steps"] == 2
        assert scope["mean_step_time_s"] == pytest.approx(30.0)
        assert scope["p95_step_time_s"] == pytest.approx(20 + 0.95 * 20)
        assert scope["queue_wait_s"] == {"1": {"count": 2, "mean": 5.0, "p95": pytest.approx(9.5)}}
        assert (scope["preemptions"], scope["recomputed_tokens"]) == (1, 40)
        assert (scope["trajectories"], scope["generated_tokens"]) == (2, 400)
    assert p0["last_step_end_s"] == 60.0


def test_empty_run_has_null_rates() -> None:
    recorder = Recorder(Topology(1, 2), "rlix", PolicyConfig())
    recorder.finish(0.0)
    result = summary(recorder)
    assert result["pipelines"] == {}
    assert result["overall"]["steps"] == 0
    assert result["overall"]["busy_share"] is None
    assert result["overall"]["mean_step_time_s"] is None


def _brute_force_seconds(recorder: Recorder) -> dict[str, dict[str, int]]:
    """Per pipeline, seconds of GPU time held / busy / loading, sampled at every half second
    (every boundary of the fake run is a whole second)."""
    out: dict[str, dict[str, int]] = {}
    for gpu in range(recorder.topology.num_gpus):
        for second in range(math.ceil(recorder.end_s)):
            t = second + 0.5
            holders = [a[0] for a in recorder.allocations if a[4] == gpu and a[5] <= t < a[6]]
            assert len(holders) <= 1
            if not holders:
                continue
            kinds = {a[4] for a in recorder.activity if a[0] == holders[0] and a[3] == gpu and a[6] <= t < a[7]}
            tally = out.setdefault(holders[0], {"held": 0, "busy": 0, "loading": 0})
            tally["held"] += 1
            tally["busy"] += "busy" in kinds
            tally["loading"] += "loading" in kinds and "busy" not in kinds
    return out


def test_two_pipeline_run_against_brute_force() -> None:
    recorder = two_pipeline_run()
    result = summary(recorder)
    seconds = _brute_force_seconds(recorder)
    pool_s = recorder.topology.num_gpus * recorder.end_s
    for pid, tally in seconds.items():
        figures = result["pipelines"][pid]
        assert figures["held_share"] == pytest.approx(tally["held"] / pool_s)
        assert figures["busy_share"] == pytest.approx(tally["busy"] / tally["held"])
        assert figures["loading_share"] == pytest.approx(tally["loading"] / tally["held"])
    overall = result["overall"]
    assert overall["busy_share"] == pytest.approx(sum(t["busy"] for t in seconds.values()) / pool_s)
    assert overall["shrinks"] == {"preempt": 2, "rebalance": 2, "release": 6, "reclaim": 0}
    assert result["pipelines"]["p1"]["shrinks"] == {"preempt": 0, "rebalance": 2, "release": 2, "reclaim": 0}
    assert (result["pipelines"]["p1"]["kind"], result["pipelines"]["p1"]["max_staleness"]) == ("multi_lora", 1)


def test_summary_of_tables_equals_summary_of_recorder() -> None:
    recorder = two_pipeline_run()
    assert summary(tables_from_recorder(recorder)) == summary(recorder)


@pytest.mark.parametrize("slice_rows", [1, 2, 5])
def test_rollout_counts_do_not_depend_on_the_slice_size(
    monkeypatch: pytest.MonkeyPatch, slice_rows: int
) -> None:
    """The counts are summed a slice of rows at a time (memory of 10^8-row tables); slices of
    any size, including ones cutting a pipeline's rows apart, give the same figures."""
    import rlix.runs.totals as totals

    for recorder, specs in (hand_made(), (two_pipeline_run(), None)):
        whole = summary(recorder, specs)
        monkeypatch.setattr(totals, "_SLICE_ROWS", slice_rows)
        assert summary(recorder, specs) == whole
        monkeypatch.undo()


def test_a_pipeline_rate_is_over_its_own_span() -> None:
    """Admitted at 20 s, removed at 60 s of a 100 s run: 2 steps in 40 s is 180 steps an hour
    (the run's rate stays 72). While it is the only pipeline, the all-active window is its
    span: GPU 0 busy 20-40 (20 s), loading 40-45 (5 s) of 2 x 40 GPU-seconds."""
    import dataclasses

    recorder, specs = hand_made()
    tables = dataclasses.replace(
        tables_from_recorder(recorder, specs), admitted_s={"p0": 20.0}, removed_s={"p0": 60.0}
    )
    result = summary(tables)
    p0, overall = result["pipelines"]["p0"], result["overall"]
    assert p0["active_s"] == 40.0
    assert p0["steps_per_hour"] == pytest.approx(180.0)
    assert overall["steps_per_hour"] == pytest.approx(72.0)
    window = overall["all_active"]
    assert (window["t_start"], window["t_end"]) == (20.0, 60.0)
    assert window["busy_share"] == pytest.approx(20 / 80)
    assert window["loading_share"] == pytest.approx(5 / 80)
    assert window["idle_share"] == pytest.approx(55 / 80)


def test_spans_come_from_the_event_log() -> None:
    """two_pipeline_run admits both at 0 and removes both at 70 of an 80 s run."""
    result = summary(two_pipeline_run())
    p0 = result["pipelines"]["p0"]
    assert p0["active_s"] == 70.0
    assert p0["steps_per_hour"] == pytest.approx(2 / 70 * 3600)
    assert result["overall"]["steps_per_hour"] == pytest.approx(3 / 80 * 3600)


def sampled_states(recorder: Recorder, t0: float, t1: float, counted: Callable[[float], bool]) -> tuple[int, int, int]:
    """Busy and loading (not busy) samples, and all samples, of every GPU at each half second
    of [t0, t1) (offset a quarter second) that `counted` keeps: its holder's activity there."""
    busy = loading = samples = 0
    t = t0 + 0.25
    while t < t1:
        if counted(t):
            for gpu in range(recorder.topology.num_gpus):
                samples += 1
                holders = [a[0] for a in recorder.allocations if a[4] == gpu and a[5] <= t < a[6]]
                kinds = {a[4] for a in recorder.activity
                         if holders and a[0] == holders[0] and a[3] == gpu and a[6] <= t < a[7]}
                busy += "busy" in kinds
                loading += "loading" in kinds and "busy" not in kinds
        t += 0.5
    return busy, loading, samples


@pytest.mark.parametrize("p1_admitted_s", [0.0, 12.0, 33.5])
def test_all_active_shares_against_brute_force(p1_admitted_s: float) -> None:
    """The window's shares against a count of every GPU's state at each half second in it."""
    import dataclasses

    recorder = two_pipeline_run()
    tables = tables_from_recorder(recorder)
    tables = dataclasses.replace(tables, admitted_s={**tables.admitted_s, "p1": p1_admitted_s})
    window = summary(tables)["overall"]["all_active"]
    t0, t1 = p1_admitted_s, 70.0
    assert (window["t_start"], window["t_end"]) == (t0, t1)
    busy, loading, samples = sampled_states(recorder, t0, t1, lambda t: True)
    assert window["busy_share"] == pytest.approx(busy / samples)
    assert window["loading_share"] == pytest.approx(loading / samples)


def test_no_all_active_window_when_spans_do_not_meet() -> None:
    import dataclasses

    tables = tables_from_recorder(two_pipeline_run())
    tables = dataclasses.replace(tables, admitted_s={"p0": 0.0, "p1": 71.0}, removed_s={"p0": 70.0})
    assert summary(tables)["overall"]["all_active"] is None


def test_while_waiting_by_hand() -> None:
    """hand_made's p0 holds GPU 0 from the start; a second job arrives at 30 s and is removed
    at 50 s without a grant. While it waits (30-50 s, 2 x 20 GPU-seconds) GPU 0 is busy 30-40
    and loading, not busy, 40-45. With no job waiting there is no such figure."""
    import dataclasses

    recorder, specs = hand_made()
    tables = tables_from_recorder(recorder, specs)
    assert summary(tables)["overall"]["while_waiting"] is None
    tables = dataclasses.replace(tables, more_pipelines=("late",), admitted_s={"late": 30.0},
                                 removed_s={"late": 50.0})
    waiting = summary(tables)["overall"]["while_waiting"]
    assert waiting["waiting_s"] == pytest.approx(20.0)
    assert waiting["busy_share"] == pytest.approx(10 / 40)
    assert waiting["loading_share"] == pytest.approx(5 / 40)
    assert waiting["idle_share"] == pytest.approx(25 / 40)


@pytest.mark.parametrize("waits", [((5.0, 25.0), (40.0, None)), ((3.5, 30.0), (12.0, 61.0), (70.0, 71.0))])
def test_while_waiting_shares_against_brute_force(waits: tuple[tuple[float, float | None], ...]) -> None:
    """Jobs that wait (arrival, removal or None: still waiting at the end, never granted)
    beside two_pipeline_run's, overlapping or not: the shares against a count of every GPU's
    state at each half second some job waits."""
    import dataclasses

    recorder = two_pipeline_run()
    tables = tables_from_recorder(recorder)
    ids = tuple(f"w{i}" for i in range(len(waits)))
    tables = dataclasses.replace(
        tables, more_pipelines=ids,
        admitted_s={**tables.admitted_s, **{pid: a for pid, (a, _) in zip(ids, waits, strict=True)}},
        removed_s={**tables.removed_s, **{pid: r for pid, (_, r) in zip(ids, waits, strict=True) if r is not None}})
    got = summary(tables)["overall"]["while_waiting"]
    end = tables.makespan_s
    busy, loading, samples = sampled_states(
        recorder, 0.0, end, lambda t: any(a <= t < (end if r is None else r) for a, r in waits))
    assert got["waiting_s"] == pytest.approx(samples / recorder.topology.num_gpus * 0.5)
    assert got["busy_share"] == pytest.approx(busy / samples)
    assert got["loading_share"] == pytest.approx(loading / samples)
