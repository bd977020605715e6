"""The bundled cpu-demo scenario end to end on the executor (tiny Qwen2, hf backend, 4 declared
GPUs): both pipelines learn, rollouts are preempted and nothing is lost, the run folder passes
the invariant checks and its events replay to exactly the recorded decisions. During the run one
rollout worker is killed mid-call; its trajectories are re-queued and finish elsewhere.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import ray

from rlix.executor.live import RunResult, execute
from rlix.executor.run import plan
from rlix.runs.verify import check, replay
from rlix.scenarios import load_scenario

pytest.importorskip("transformers")


#: The bundled file's executor settings make both pipelines learn the toy task within 12 steps
#: (actor_lr 1e-2; lora_lr 3e-2, rank 8, alpha 16 with LoRA on lm_head too; 16 new tokens): the
#: demo runs exactly as bundled, so these tests check what a user gets.
def learning_cpu_demo() -> object:
    return load_scenario("cpu-demo")


def _kill_one_busy_worker(stop: threading.Event, killed: dict[str, Any]) -> None:
    """As soon as pipeline ft has a rank generating with more trajectories waiting, SIGKILL that
    rank's worker process. The pids are asked for beforehand and the kill is the OS's, not
    `ray.kill` (which goes through the GCS): a generate call on the tiny model takes a fraction
    of a second, and a kill that lands after it returned, on a rank then shrunk before its next
    call, re-queues nothing. With trajectories waiting, a kill that still lands just after the
    call returned meets the rank's next call, which fails and re-queues its batch."""
    pids: dict[Any, int] = {}
    while not stop.is_set():
        try:
            snap = ray.get(ray.get_actor("pipeline-ft").snapshot.remote(), timeout=5)
            for worker in snap["ranks"]["workers"].values():
                if worker not in pids:
                    pids[worker] = ray.get(worker.pid.remote(), timeout=5)
        except (ValueError, ray.exceptions.RayError):
            time.sleep(0.2)
            continue
        busy = [r for r, n in snap["ranks"]["in_flight"].items() if n > 0]
        if busy and snap["waiting"] > 0 and snap["ranks"]["restarts"] == 0:
            worker = snap["ranks"]["workers"][busy[0]]
            killed["pid"], killed["rank"] = pids[worker], busy[0]
            os.kill(pids[worker], signal.SIGKILL)
            return
        time.sleep(0.05)


@pytest.fixture(scope="module")
def demo(ray_session: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunResult, dict[str, Any]]]:
    the_plan = plan(learning_cpu_demo())
    stop, killed = threading.Event(), {}
    killer = threading.Thread(target=_kill_one_busy_worker, args=(stop, killed), daemon=True)
    killer.start()
    try:
        result = execute(the_plan, out_dir=tmp_path_factory.mktemp("exec") / "cpu-demo", quiet=True,
                         check_invariants=True, timeout_s=1500)
    finally:
        stop.set()
    yield result, killed


def _table(result: RunResult, name: str) -> pd.DataFrame:
    assert result.out_dir is not None
    return pd.read_parquet(Path(result.out_dir) / f"{name}.parquet")


def _rewards(result: RunResult, pipeline_id: str, adapter: str | None = None) -> list[float]:
    steps = _table(result, "steps").sort_values("t_end")
    steps = steps[steps.pipeline_id == pipeline_id]
    if adapter is not None:
        steps = steps[steps.adapter == adapter]
    return steps["reward_mean"].tolist()


def _rises(rewards: list[float]) -> bool:
    """Some later three steps' mean reward beats the first three's by 0.05. Not the last three:
    on this toy task a step on noise now and then sends a LoRA adapter's mass to bytes that
    are not text, after it learned (rlix.executor.ml.toy_tasks; once in a CI run, an adapter
    at 0.51 fell to 0.04 in its last two steps); the executor's part, training on what it
    rolled out and publishing it, shows in the rise before."""
    first = sum(rewards[:3]) / 3
    return any(sum(rewards[i:i + 3]) / 3 > first + 0.05 for i in range(3, len(rewards) - 2))


def test_both_pipelines_finish_and_the_full_finetune_learns(demo: tuple[RunResult, dict[str, Any]]) -> None:
    result, _ = demo
    assert {p: s["status"] for p, s in result.status.items()} == {"ft": "finished", "lora": "finished"}
    assert len(_rewards(result, "ft")) == 12 and len(_rewards(result, "lora")) == 24
    rewards = _rewards(result, "ft")
    assert _rises(rewards), [round(r, 3) for r in rewards]


def test_the_lora_pipeline_learns_and_each_adapter_trained(demo: tuple[RunResult, dict[str, Any]]) -> None:
    """An adapter's reward rises, and every adapter was trained: its saved LoRA B matrices have
    left their zero init. Not "every adapter's reward rises": the Ray demo's timing is not
    seeded, and in 12 steps of 16 samples one adapter of two now and then stays flat (a CI run:
    0.24, 0.25, 0.21, 0.26, ...); that each adapter learns is checked with fixed seeds in
    tests/executor/ml/test_learning.py."""
    from safetensors.torch import load_file

    result, _ = demo
    rewards = {adapter: _rewards(result, "lora", adapter) for adapter in ("a0", "a1")}
    assert all(len(r) == 12 for r in rewards.values())
    assert any(_rises(r) for r in rewards.values()), {a: [round(x, 3) for x in r] for a, r in rewards.items()}
    assert result.out_dir is not None
    for adapter in ("a0", "a1"):
        tensors = load_file(str(Path(result.out_dir) / "models" / "lora" / adapter / "adapter_model.safetensors"))
        lora_b = [t for name, t in tensors.items() if "lora_B" in name]
        assert lora_b and any(float(t.abs().sum()) > 0 for t in lora_b), adapter


def test_rollouts_preempted_and_none_lost(demo: tuple[RunResult, dict[str, Any]]) -> None:
    result, _ = demo
    rollouts = _table(result, "rollouts")
    final = rollouts.sort_values("t_end").groupby(["pipeline_id", "adapter", "trajectory_id"]).tail(1)
    assert (final.status == "completed").all()
    assert len(final) == 16 * 12 + 16 * 24
    assert rollouts.preemptions.max() > 0 and (rollouts.status == "requeued").any()


def test_run_folder_checks_and_replays_exactly(demo: tuple[RunResult, dict[str, Any]]) -> None:
    result, _ = demo
    assert result.out_dir is not None
    num_allocations, num_rollouts = check(result.out_dir)
    assert num_allocations > 0 and num_rollouts > 0
    replayed = replay(result.out_dir)
    assert replayed.identical, str(replayed)


def test_killed_rollout_worker_had_its_trajectories_requeued(demo: tuple[RunResult, dict[str, Any]]) -> None:
    result, killed = demo
    assert "rank" in killed, "no ft rank was caught generating"
    rollouts = _table(result, "rollouts")
    lost = rollouts[(rollouts.pipeline_id == "ft") & (rollouts.dp_rank == killed["rank"])
                    & (rollouts.status == "requeued")]
    assert len(lost), "the dead worker's trajectories were re-queued"
    done = rollouts[(rollouts.pipeline_id == "ft") & (rollouts.status == "completed")]
    assert set(lost.trajectory_id) <= set(done.trajectory_id)


def test_the_summary_says_how_the_run_ended_and_what_it_survived(demo: tuple[RunResult, dict[str, Any]]) -> None:
    result, killed = demo
    assert result.out_dir is not None
    summary = json.loads((Path(result.out_dir) / "summary.json").read_text())
    assert summary["finished"] is True and summary["stop_reason"] is None
    assert {pid: p["state"] for pid, p in summary["pipelines"].items()} == {"ft": "finished", "lora": "finished"}
    died = [f for f in summary["faults"] if f["kind"] == "rollout_worker_died"]
    assert [f["pipeline_id"] for f in died] == ["ft"], summary["faults"]
    assert f"rank {killed['rank']}" in died[0]["detail"]


def test_the_trained_models_are_in_the_run_folder(demo: tuple[RunResult, dict[str, Any]]) -> None:
    from peft import PeftConfig
    from transformers import AutoModelForCausalLM

    result, _ = demo
    assert result.out_dir is not None
    models = Path(result.out_dir) / "models"
    assert sorted(p.name for p in models.iterdir()) == ["ft", "lora"]
    AutoModelForCausalLM.from_pretrained(models / "ft")  # loadable as it is
    for adapter in ("a0", "a1"):
        assert PeftConfig.from_pretrained(models / "lora" / adapter).r > 0
    assert not [p for p in Path(result.out_dir).parent.iterdir() if p.name.startswith(".")]  # no staging left


def test_checkpoints_every_four_steps_the_newest_two_kept(demo: tuple[RunResult, dict[str, Any]]) -> None:
    from rlix.executor.checkpoints import list_checkpoints, read_checkpoint
    from rlix.executor.ml.actor import ActorTrainer

    result, _ = demo
    assert result.out_dir is not None
    run = Path(result.out_dir)
    ft = list_checkpoints(run / "checkpoints" / "ft")
    assert [read_checkpoint(p)["version"] for p in ft] == [8, 12]
    lora = [read_checkpoint(p) for p in list_checkpoints(run / "checkpoints" / "lora")]
    assert len(lora) == 2 and all(m["version"] % 4 == 0 for m in lora)
    newest = lora[-1]  # every adapter's state is in each: its versions say where each stood
    assert newest["next_step"][newest["adapter"]] == newest["version"] and set(newest["versions"]) == {"a0", "a1"}
    assert 0 < read_checkpoint(ft[0])["num_events"] < read_checkpoint(ft[1])["num_events"]
    trainer = ActorTrainer(run / "models" / "ft")
    trainer.load(ft[-1])
    assert trainer.version == 12
    steps = _table(result, "steps")
    saved = steps[steps.checkpoint_s > 0]
    assert sorted(zip(saved.pipeline_id, saved.adapter, saved.step + 1, strict=True)) == sorted(
        [("ft", "base", v) for v in (4, 8, 12)] + [("lora", a, v) for a in ("a0", "a1") for v in (4, 8, 12)])
