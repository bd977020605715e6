"""The simulator's rank moves cost what the cost model says, and the summary counts what the
rows say: a golden timeline worked out by hand, and counts of a run cut at its time limit.

The golden run: tiny's full-finetune pipeline alone on one node of 2 H100s (1.5B, trains on
GPUs 0-1, rolls out on 0-1 at TP 1, 2 steps). Each step, both ranks load the weights at once
and, after the rollout, offload them at once before the old log-probs can start on the same
GPUs, so each load and each offload is on the critical path exactly once per step (with the
policy's wake-ahead off: on, the second load runs during the sync, below):

- makespan(load + d) = makespan + 2 d, and the same for the offload;
- loading GPU-seconds = 2 GPUs x 2 steps x (load + offload).

The times below are recomputed by hand from the cost model's documented defaults (a change
of a default must show here): 1.5B parameters in BF16 are 2 N bytes; a load is 2 s fixed plus
those bytes over the 25 GB/s host link, an offload 1 s fixed (a full-finetune engine drops its
weights; a multi-LoRA one copies its base out, below); rlix's pipeline first reads the bytes
from storage at 2 GB/s into host memory, holding nothing, and its init is then 60 s plus a
copy of each GPU's half over its host link; a weight sync pushes them at RLix's 60 GB / 90 s.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any

import pytest

from rlix.scenarios import load_scenario
from rlix.scenarios.load import validate_scenario
from rlix.scenarios.models import MODELS
from rlix.sim import simulate

WEIGHT_BYTES = 2 * MODELS["1.5b"].num_params
NUM_GPUS_INIT = 2  # actor_train on GPUs 0-1
LOAD_S = 2.0 + WEIGHT_BYTES / 25e9
OFFLOAD_S = 1.0
READ_S = WEIGHT_BYTES / 2e9
INIT_S = 60.0 + WEIGHT_BYTES / NUM_GPUS_INIT / 25e9
SYNC_S = WEIGHT_BYTES / (60e9 / 90)
NUM_GPUS, NUM_STEPS = 2, 2


def alone_on_two(costs: dict[str, float] | None = None, wake_ahead: bool = False) -> Any:
    data = load_scenario("tiny").model_dump(mode="json", exclude_none=True)
    data["policy"] = {"name": "rlix", "config": {"wake_ahead": wake_ahead}}
    data["pipelines"] = [p for p in data["pipelines"] if p["id"] == "ft"]
    pipeline = data["pipelines"][0]
    pipeline["clusters"]["actor_infer"]["gpus"] = "0-1"
    pipeline["steps"] = NUM_STEPS
    data["topology"]["gpus_per_node"] = NUM_GPUS
    data["costs"] = costs or {}
    return validate_scenario(data)


@pytest.fixture(scope="module")
def golden() -> Any:
    return simulate(alone_on_two(), check_invariants=True, plots=False)


def test_woken_ahead_the_second_load_runs_during_the_sync(golden: Any) -> None:
    """rlix.policy.wake_ahead: the job's init was its only absence, expected to end at once,
    so when step 0's training ends its ranks load at once, during the sync, and step 1's
    rollout starts when the sync ends: the makespan is one load shorter."""
    woken = simulate(alone_on_two(wake_ahead=True), check_invariants=True, plots=False)
    act = woken.tables["activity"]
    for gpu in range(NUM_GPUS):
        rows = act[act.gpu == gpu].sort_values("t_start")
        spans = list(zip(rows.stage, rows.t_start, rows.t_end, strict=True))
        loads = [(t0, t1) for stage, t0, t1 in spans if stage == "load"]
        trains = [t1 for stage, _t0, t1 in spans if stage == "actor_train"]
        rollouts = [t0 for stage, t0, _t1 in spans if stage == "rollout"]
        assert loads[1] == pytest.approx((trains[0], trains[0] + LOAD_S))
        assert rollouts[1] == pytest.approx(trains[0] + SYNC_S)
    # (to a few ms: the rollout itself ends on the engine's iteration boundaries)
    assert woken.summary["makespan_s"] == pytest.approx(golden.summary["makespan_s"] - LOAD_S, abs=0.05)


def test_the_golden_timeline(golden: Any) -> None:
    act = golden.tables["activity"]
    for gpu in range(NUM_GPUS):
        rows = act[act.gpu == gpu].sort_values("t_start")
        stages = list(rows.stage)
        assert stages == ["init"] + ["load", "rollout", "offload", "old_log_probs", "actor_train"] * NUM_STEPS
        spans = list(zip(rows.stage, rows.t_start, rows.t_end, strict=True))
        assert spans[0][1:] == (pytest.approx(READ_S), pytest.approx(READ_S + INIT_S))
        loads = [(t0, t1) for stage, t0, t1 in spans if stage == "load"]
        offloads = [(t0, t1) for stage, t0, t1 in spans if stage == "offload"]
        assert [t1 - t0 for t0, t1 in loads] == pytest.approx([LOAD_S] * NUM_STEPS)
        assert [t1 - t0 for t0, t1 in offloads] == pytest.approx([OFFLOAD_S] * NUM_STEPS)
        # The first load starts when init ends, the second when step 0's new weights are
        # published (training's end plus the sync); old log-probs start at the offload's end.
        trains = [t1 for stage, _t0, t1 in spans if stage == "actor_train"]
        assert [t0 for t0, _ in loads] == pytest.approx([READ_S + INIT_S, trains[0] + SYNC_S])
        logprobs = [t0 for stage, t0, _t1 in spans if stage == "old_log_probs"]
        assert logprobs == pytest.approx([t1 for _, t1 in offloads])
        assert golden.summary["makespan_s"] == pytest.approx(trains[-1] + SYNC_S)
    loading_gpu_s = NUM_GPUS * NUM_STEPS * (LOAD_S + OFFLOAD_S)
    overall = golden.summary["overall"]
    assert overall["loading_share"] == pytest.approx(loading_gpu_s / (NUM_GPUS * golden.summary["makespan_s"]))


@pytest.mark.parametrize(("field", "delta"), [
    ("expand_fixed_s", 10.0), ("expand_fixed_s", -2.0), ("shrink_fixed_s", 10.0), ("shrink_fixed_s", -1.0),
])
def test_each_move_cost_moves_the_makespan_and_the_loading_share(golden: Any, field: str, delta: float) -> None:
    """Loads and offloads each lie once a step on the critical path: +d on either one adds
    2 d to the makespan (2 steps) and 2 GPUs x 2 steps x d to the loading GPU-seconds. -2 and
    -1 take the fixed parts to 0: a move then costs its bytes alone, and still counts."""
    fixed = {"expand_fixed_s": 2.0, "shrink_fixed_s": 1.0}[field]
    result = simulate(alone_on_two({field: fixed + delta}), plots=False)
    makespan = golden.summary["makespan_s"] + NUM_STEPS * delta
    assert result.summary["makespan_s"] == pytest.approx(makespan, abs=1e-9)
    loading_gpu_s = NUM_GPUS * NUM_STEPS * (LOAD_S + OFFLOAD_S + delta)
    assert result.summary["overall"]["loading_share"] == pytest.approx(loading_gpu_s / (NUM_GPUS * makespan))
    # Only the moves changed: the GPU-time spent busy is the same.
    busy = golden.summary["overall"]["busy_share"] * golden.summary["makespan_s"]
    assert result.summary["overall"]["busy_share"] * makespan == pytest.approx(busy)


def test_an_offload_copies_weights_only_for_a_multi_lora_engine() -> None:
    """A multi-LoRA engine sleeps keeping its base in host memory (vLLM's level 1: the copy
    is paid); a full-finetune engine drops its weights (level 2: only the fixed part). Both
    pipelines of tiny on 4 GPUs, each shrink timed from the activity rows."""
    result = simulate(load_scenario("tiny"), plots=False)
    act = result.tables["activity"]
    offloads = act[act.stage == "offload"]
    durations = {pid: set((rows.t_end - rows.t_start).round(9)) for pid, rows in offloads.groupby("pipeline_id")}
    assert durations["ft"] == {round(OFFLOAD_S, 9)}
    assert durations["lora"] == {round(1.0 + WEIGHT_BYTES / 25e9, 9)}


# --- counts of a run cut at its time limit ----------------------------------------------------


def counted_by_hand(rows: list[dict[str, Any]]) -> dict[str, int]:
    """From the attempt rows, one trajectory at a time: each trajectory ends in one last row
    (completed, or in flight when the run was cut, or aborted); every attempt before it was
    cut short and re-queued, so preemptions = rows - trajectories, whatever the statuses say."""
    attempts: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        attempts[(row["pipeline_id"], row["adapter"], row["trajectory_id"])].append(row)
    completed = [r for rs in attempts.values() for r in rs if r["status"] == "completed"]
    return {
        "trajectories": len(completed),
        "generated_tokens": sum(int(r["response_tokens"]) for r in completed),
        "preemptions": sum(len(rs) - 1 for rs in attempts.values()),
        "recomputed_tokens": sum(int(r["recomputed_tokens"]) for r in rows),
    }


def shrinks_in_log(event_lines: list[str]) -> Counter[tuple[str, str]]:
    """(pipeline, reason) of every Shrink decision in the event log."""
    found: Counter[tuple[str, str]] = Counter()
    for line in event_lines[1:]:
        for decision in json.loads(line)["decisions"]:
            if decision["type"] == "Shrink":
                found[(decision["pipeline_id"], decision["reason"])] += 1
    return found


def test_counts_of_a_run_cut_at_its_time_limit() -> None:
    data = load_scenario("tiny").model_dump(mode="json", exclude_none=True)
    data["max_time_s"] = 80.0  # in the middle of the first rollouts: trajectories in flight
    result = simulate(validate_scenario(data), plots=False)
    rows = result.tables["rollouts"].to_dict("records")
    statuses = Counter(r["status"] for r in rows)
    assert statuses["in_flight"] > 0 and statuses["requeued"] > 0  # else the cut proves nothing
    summary = result.summary
    overall = counted_by_hand(rows)
    assert overall["preemptions"] == statuses["requeued"]  # the rows' statuses agree
    for name, value in overall.items():
        assert summary["overall"][name] == value, name
    shrinks = shrinks_in_log(result.recorder.event_lines)
    for reason in ("preempt", "rebalance", "release"):
        assert summary["overall"]["shrinks"][reason] == sum(n for (_, r), n in shrinks.items() if r == reason)
    for pipeline_id, figures in summary["pipelines"].items():
        mine = counted_by_hand([r for r in rows if r["pipeline_id"] == pipeline_id])
        for name, value in mine.items():
            assert figures[name] == value, (pipeline_id, name)
