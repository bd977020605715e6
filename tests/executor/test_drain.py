"""A drained shrink on the executor's rollout ranks (`Ranks.shrink(dp_rank, drain_s)`), with a
fake worker in place of the Ray actor: the call a rank runs finishes before the worker is
stopped when it ends within the drain, is cut at the drain's end when it does not, and is cut at
once without a drain. No Ray, no model."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rlix.executor.ranks import Ranks
from rlix.executor.spans import ActorSpans
from rlix.executor.trajectories import RolloutQueue, Trajectory


class _Remote:
    def __init__(self, fn: Callable[..., Coroutine[Any, Any, Any]]) -> None:
        self.fn = fn

    def remote(self, *args: Any) -> Coroutine[Any, Any, Any]:
        return self.fn(*args)


class FakeWorker:
    """A rollout call takes `call_s` unless `stop` comes first (then it hands back at once)."""

    def __init__(self, call_s: float) -> None:
        self.call_s = call_s
        self.calls: list[str] = []  # how each call ended: "finished" or "stopped"
        self._stop = asyncio.Event()
        self.generate, self.stop = _Remote(self._generate), _Remote(self._stop_now)
        self.wake, self.sleep = _Remote(self._nothing), _Remote(self._nothing)

    async def _generate(self, items: list[Trajectory]) -> list[Any]:
        try:
            await asyncio.wait_for(self._stop.wait(), self.call_s)
            self.calls.append("stopped")
        except TimeoutError:
            self.calls.append("finished")
        return []

    async def _stop_now(self) -> None:
        self._stop.set()

    async def _nothing(self, *args: Any) -> None:
        return None


def _pipeline(queue: RolloutQueue, loop: asyncio.AbstractEventLoop) -> Any:
    async def attempts_done(attempts: list[Any]) -> None:
        return None

    return SimpleNamespace(
        queue=queue, setup=SimpleNamespace(max_batch_per_rank=8, balance=False), now=loop.time, spans=ActorSpans("p", loop.time),
        attempts_done=attempts_done, record=lambda attempts: None, fault=lambda *a: None, fail=lambda exc: None,
        worker_cpu=lambda account: None, report_progress=lambda: None, pipeline_id="p")


async def _shrink_during_a_call(call_s: float, drain_s: float) -> tuple[list[str], float]:
    loop = asyncio.get_running_loop()
    queue = RolloutQueue()
    queue.submit([Trajectory("p", "base", 0, i, i, prompt=None, prompt_tokens=4) for i in range(4)])
    ranks = Ranks(_pipeline(queue, loop))
    worker = FakeWorker(call_s)
    ranks.workers[0] = worker
    await ranks.expand(0, (0,))
    await asyncio.sleep(0.05)  # the rank's loop has taken the 4 trajectories and is generating
    t0 = loop.time()
    await ranks.shrink(0, drain_s)
    return worker.calls, loop.time() - t0


def test_a_call_that_ends_within_the_drain_finishes() -> None:
    calls, took = asyncio.run(_shrink_during_a_call(call_s=0.3, drain_s=2.0))
    assert calls == ["finished"]
    assert took < 1.0  # it did not wait out the whole drain


def test_a_call_longer_than_the_drain_is_cut_at_its_end() -> None:
    calls, took = asyncio.run(_shrink_during_a_call(call_s=5.0, drain_s=0.3))
    assert calls == ["stopped"]
    assert took == pytest.approx(0.3, abs=0.2)


def test_without_a_drain_the_call_is_cut_at_once() -> None:
    calls, took = asyncio.run(_shrink_during_a_call(call_s=0.3, drain_s=0.0))
    assert calls == ["stopped"]
    assert took < 0.2


def test_a_live_run_with_drains_finishes_checks_and_replays(ray_session: object, tmp_path: Path) -> None:
    """cpu-demo cut to two declared GPUs and 4 steps, both homes stacked on GPU 0, ranks cut
    for the other pipeline's grant draining up to 2 s: the drained shrinks reach the executor
    and the run is as sound as any."""
    import json

    from rlix.executor.live import execute
    from rlix.executor.run import plan
    from rlix.runs.verify import check, replay
    from rlix.scenarios.load import validate_scenario
    from tests.executor.demos import small_demo

    pytest.importorskip("transformers")
    data = small_demo()
    # Both homes on GPU 0, so each pipeline's training cuts the other's rank there.
    data["pipelines"][1].update(home="0", clusters={"actor_train": {"tp": 1, "gpus": "0"},
                                                    "actor_infer": {"tp": 1, "gpus": "0-1"}})
    data["policy"] = {**data.get("policy", {}), "config": {**data.get("policy", {}).get("config", {}), "max_drain_s": 2.0}}
    result = execute(plan(validate_scenario(data)), out_dir=tmp_path / "run", quiet=True, check_invariants=True,
                     timeout_s=600)
    assert result.finished and result.out_dir is not None
    shrinks = [d for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()
               for d in json.loads(line).get("decisions", []) if d["type"] == "Shrink"]
    # Whether a cut rank has a call in flight to drain is Ray's timing (a multi-LoRA pipeline
    # now keeps GPU 0 from one adapter to the next, so cuts are fewer); the drain itself is
    # held to its bound by the fake-worker tests above. Here: cuts for the other's grant come,
    # and every drain the executor carried out was one and kept its bound.
    assert any(s["reason"] == "preempt" for s in shrinks)
    drained = [s for s in shrinks if s.get("drain_s")]
    assert all(s["reason"] == "preempt" and 0 < s["drain_s"] <= 2.0 for s in drained)
    assert replay(tmp_path / "run").identical
    check(tmp_path / "run")
