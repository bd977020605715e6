"""The Python API used wrongly, as a researcher writing their own pipeline might: every bad call
raises the orchestrator's own error in one line (a type to catch, not Ray's traceback), leaves
the other pipelines going, and the run folder written at the end still holds under
`rlix-sim check` and replays identically."""

from __future__ import annotations

import _thread
import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import ray

from rlix.executor.api import Client, RankHandler
from rlix.policy import ClusterSpec, PipelineKind, PipelineSpec
from rlix.policy.errors import EventError, SpecError
from rlix.runs.codec import spec_to_dict
from rlix.runs.verify import check, replay
from tests.executor.api_support import Handler, register


@ray.remote(num_cpus=0)
class FailingHandler(RankHandler):
    """Cannot load a rank: every expansion raises."""

    async def on_expand(self, dp_rank: int, gpus: tuple[int, ...]) -> None:
        raise RuntimeError(f"cannot load rank {dp_rank}")


@ray.remote(num_cpus=0)
class HangingHandler(RankHandler):
    """Its expansions never return (an engine that hangs loading)."""

    async def on_expand(self, dp_rank: int, gpus: tuple[int, ...]) -> None:
        await asyncio.sleep(3600)


def _one_line(error: pytest.ExceptionInfo[Exception]) -> str:
    assert not isinstance(error.value, ray.exceptions.RayError), type(error.value).__mro__
    text = str(error.value)
    assert "\n" not in text, text
    return text


def _wait_for(condition: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _folder_holds(client: Client, out: Path) -> Path:
    written = client.write_run(out, plots=False)
    check(written)
    assert replay(written).identical
    return written


def test_bad_calls_raise_the_orchestrators_error_in_one_line(client: Client, tmp_path: Path) -> None:
    other = register(client, "other", (0, 1), (0, 1))
    pid = register(client, "bad", (0, 1, 2, 3), (2, 3), admit=False)

    with pytest.raises(EventError) as error:
        client.request(pid, "actor_train", 1)
    assert "before the pipeline was admitted" in _one_line(error)
    client.admit_pipeline(pid)
    calls: list[tuple[Callable[[], object], str]] = [
        (lambda: client.admit_pipeline(pid), "already admitted"),
        (lambda: client.release(pid, "actor_train"), "does not hold it"),
        (lambda: client.release_and_request(pid, "actor_train", "actor_infer", 6), "does not hold it"),
        (lambda: client.progress(pid, 3.0), "while not rolling out"),
        (lambda: client.request(pid, "critic", 1), "no such cluster"),
        (lambda: client.request(pid, "actor_train", 7), "priority 0..6"),
        (lambda: client.train_step_finished(pid, 0), "above 0"),
    ]
    for call, wanted in calls:
        with pytest.raises(EventError) as error:
            call()
        assert wanted in _one_line(error)
    assert client.request(pid, "actor_train", 1) == (2, 3)
    with pytest.raises(EventError) as error:  # would block this call for good
        client.request(pid, "actor_infer", 0)
    assert "holds GPUs [2, 3] of it in actor_train: it would wait for itself" in _one_line(error)
    client.release_and_request(pid, "actor_train", "actor_infer", 6, estimate=4.0)
    for remaining in (float("nan"), -1.0, 1e300):
        with pytest.raises(EventError) as error:
            client.progress(pid, remaining)
        assert "must be a finite number" in _one_line(error)
    for wrong in (None, "3", {"base": None}, True):
        with pytest.raises(TypeError) as not_a_number:
            client.progress(pid, wrong)  # type: ignore[arg-type]
        assert "give the rollout work left as a number, or a dict of one number per adapter" in _one_line(not_a_number)

    with pytest.raises(ValueError) as taken:
        client.register_pipeline(PipelineSpec(pid, PipelineKind.FULL_FINETUNE, {
            "actor_infer": ClusterSpec(1, (0,)), "actor_train": ClusterSpec(1, (0,))}))
    assert "is taken" in _one_line(taken)
    with pytest.raises(SpecError) as outside:
        register(client, "outside", (0, 9), (9,))
    assert "outside the cluster" in _one_line(outside)
    as_dict = spec_to_dict(PipelineSpec("as-dict", PipelineKind.FULL_FINETUNE, {
        "actor_infer": ClusterSpec(1, (0,)), "actor_train": ClusterSpec(1, (0,))}))
    assert client.register_pipeline(as_dict) == "as-dict"  # the form the orchestrator reads
    client.remove_pipeline("as-dict")
    with pytest.raises(KeyError) as unknown:
        client.active_ranks("nobody")
    assert "no pipeline 'nobody'" in _one_line(unknown)

    client.progress(pid, 0.0)
    client.release(pid, "actor_infer")
    client.train_step_finished(pid, 1)
    client.remove_pipeline(pid)
    with pytest.raises(RuntimeError) as ended:
        client.request(pid, "actor_train", 1)
    assert "is finished" in _one_line(ended)

    # The other pipeline goes on as if nothing happened.
    assert client.request(other, "actor_train", 1) == (0, 1)
    client.release(other, "actor_train")
    client.train_step_finished(other, 1)
    client.remove_pipeline(other)
    _folder_holds(client, tmp_path / "run")


def test_a_train_step_the_core_rejects_leaves_no_row(client: Client, tmp_path: Path) -> None:
    pid = register(client, "steps", (0, 1), (0, 1))
    client.request(pid, "actor_train", 1)
    client.release(pid, "actor_train")
    client.train_step_finished(pid, 1)
    for version, adapter in [(0, None), (1, None), (-3, None), (2, "no-such-lora")]:
        with pytest.raises(EventError):
            client.train_step_finished(pid, version, adapter)
    client.train_step_finished(pid, 2)
    client.remove_pipeline(pid)

    out = _folder_holds(client, tmp_path / "run")
    steps = pd.read_parquet(out / "steps.parquet")
    assert list(steps["step"]) == [0, 1]


def test_a_run_written_twice_keeps_the_holdings_open_at_the_first(client: Client, tmp_path: Path) -> None:
    pid = register(client, "twice", (0, 1), (0, 1), Handler.remote())  # type: ignore[attr-defined]
    client.request(pid, "actor_train", 1)
    client.release_and_request(pid, "actor_train", "actor_infer", 6, estimate=4.0)
    _wait_for(lambda: len(client.snapshot()["holders"]) == 2)
    first = _folder_holds(client, tmp_path / "first")
    written_at = float(pd.read_parquet(first / "allocations.parquet")["t_end"].max())
    time.sleep(0.3)
    client.progress(pid, 0.0)
    client.release(pid, "actor_infer")
    client.train_step_finished(pid, 1)
    client.remove_pipeline(pid)

    second = _folder_holds(client, tmp_path / "second")
    allocations = pd.read_parquet(second / "allocations.parquet")
    rollout = allocations[allocations["cluster"] == "actor_infer"]
    assert len(rollout) == 2  # one holding per rank, not cut in two by the first write
    assert (rollout["t_end"] > written_at + 0.2).all()  # they end at the release, not the write


def test_a_handler_that_raises_is_reported_in_one_line(client: Client, tmp_path: Path) -> None:
    other = register(client, "other", (0, 1), (0, 1))
    pid = register(client, "failing", (2, 3), (2, 3), FailingHandler.remote())  # type: ignore[attr-defined]
    client.request(pid, "actor_train", 1)
    client.release_and_request(pid, "actor_train", "actor_infer", 6, estimate=4.0)
    _wait_for(lambda: client.snapshot()["decision_failures"])
    failures = client.snapshot()["decision_failures"]
    assert all("\n" not in line and line.endswith(("cannot load rank 0", "cannot load rank 1")) for line in failures), failures

    assert client.request(other, "actor_train", 1) == (0, 1)
    client.release(other, "actor_train")
    client.withdraw(pid, "actor_infer")
    for done in (pid, other):
        client.remove_pipeline(done)
    _folder_holds(client, tmp_path / "run")


def _rolling_on_gpus_2_3(client: Client, handler: Any) -> str:
    """A pipeline "stuck" of `handler`, trained once on GPUs 2-3, now holding both for rollout."""
    stuck = register(client, "stuck", (2, 3), (2, 3), handler)
    client.request(stuck, "actor_train", 1)
    client.release_and_request(stuck, "actor_train", "actor_infer", 6, estimate=4.0)
    _wait_for(lambda: len(client.snapshot()["holders"]) == 2)
    return stuck


def test_killing_an_api_pipeline_kills_its_handler_before_its_gpus_go(client: Client, tmp_path: Path) -> None:
    handler = HangingHandler.remote()  # type: ignore[attr-defined]
    stuck = _rolling_on_gpus_2_3(client, handler)
    waiting = register(client, "waiting", (2, 3), (2, 3))
    pending = client.handle.request.remote(waiting, "actor_train", 1)
    ready, _ = ray.wait([pending], timeout=2.0)
    assert not ready  # the GPUs are being loaded by a handler that never returns

    assert client.kill_pipeline(stuck)["status"] == "killed"
    with pytest.raises(ray.exceptions.RayActorError):  # its engines cannot still be on the GPUs
        ray.get(handler.active_ranks.remote(), timeout=30)
    assert ray.get(pending, timeout=30) == (2, 3)
    client.release(waiting, "actor_train")
    client.remove_pipeline(waiting)
    _folder_holds(client, tmp_path / "run")


def test_a_handler_that_hangs_past_its_timeout_has_its_pipeline_killed(client: Client, tmp_path: Path) -> None:
    with pytest.raises(ValueError) as bad:
        register(client, "bad-timeout", (2, 3), (2, 3), handler_timeout_s=0)
    assert "handler_timeout_s=0" in _one_line(bad)
    handler = HangingHandler.remote()  # type: ignore[attr-defined]
    stuck = register(client, "stuck", (2, 3), (2, 3), handler, handler_timeout_s=2.0)
    client.request(stuck, "actor_train", 1)
    client.release_and_request(stuck, "actor_train", "actor_infer", 6, estimate=4.0)
    waiting = register(client, "waiting", (2, 3), (2, 3))
    pending = client.handle.request.remote(waiting, "actor_train", 1)

    # No kill_pipeline: the watchdog ends the hung expansion, the handler with it.
    assert ray.get(pending, timeout=60) == (2, 3)
    error = _taken_down(client, stuck, handler, waiting, tmp_path)
    assert "expand of rank 0 took longer than 2 s (handler_timeout_s)" in error


def _taken_down(client: Client, stuck: str, handler: Any, waiting: str, tmp_path: Path) -> str:
    """`stuck` failed, its handler killed first, `waiting` granted its GPUs: `stuck`'s error,
    after `waiting` ends and the run folder holds."""
    state = client.snapshot()["pipelines"][stuck]
    assert state["status"] == "failed"
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(handler.active_ranks.remote(), timeout=30)
    client.release(waiting, "actor_train")
    client.remove_pipeline(waiting)
    _folder_holds(client, tmp_path / "run")
    return str(state["error"])


@ray.remote(num_cpus=0)
class ShrinkFailingHandler(RankHandler):
    """Loads its ranks but can never free them: every shrink raises."""

    async def on_shrink(self, dp_rank: int, gpus: tuple[int, ...], reason: str) -> None:
        raise RuntimeError(f"cannot free rank {dp_rank}")


def test_a_handler_whose_shrinks_keep_failing_has_its_pipeline_taken_down(client: Client, tmp_path: Path) -> None:
    """A failed shrink is undone and retried after its back-off; a handler that can never free
    its ranks kept their GPUs from everyone for good (a training request behind them waited for
    ever). After MAX_FAILED_SHRINKS failures in a row the pipeline goes, its handler first."""
    from rlix.executor.actuator import MAX_FAILED_SHRINKS

    handler = ShrinkFailingHandler.remote()  # type: ignore[attr-defined]
    stuck = _rolling_on_gpus_2_3(client, handler)
    waiting = register(client, "waiting", (2, 3), (2, 3))
    assert ray.get(client.handle.request.remote(waiting, "actor_train", 1), timeout=60) == (2, 3)
    # Those before the one that took it down were reported (its two ranks' shrinks run at once,
    # so one more may have failed meanwhile).
    shrinks = [f for f in client.snapshot()["decision_failures"] if f.startswith(f"Shrink {stuck}/")]
    assert MAX_FAILED_SHRINKS - 1 <= len(shrinks) <= MAX_FAILED_SHRINKS
    error = _taken_down(client, stuck, handler, waiting, tmp_path)
    assert f"shrinks failed {MAX_FAILED_SHRINKS} times in a row" in error and "cannot free rank" in error


@ray.remote(num_cpus=0)
class NotAHandler:
    """An actor without the handler's methods."""

    def ping(self) -> str:
        return "pong"


def test_a_handler_that_is_not_an_actor_is_refused_at_registration(client: Client) -> None:
    wrong: list[tuple[object, str]] = [
        (RankHandler(), "got a RankHandler object, not a Ray actor; wrap its class with ray.remote"),
        (Handler, "got an actor class, not an actor; pass an instance of it, e.g. MyHandler.remote()"),
        (NotAHandler.remote(), "the actor has no expand, shrink, revoke method"),  # type: ignore[attr-defined]
    ]
    for handler, wanted in wrong:
        with pytest.raises(TypeError) as error:
            register(client, "wrong", (0, 1), (0,), handler)
        assert wanted in _one_line(error)
    assert client.snapshot()["pipelines"] == {}  # nothing was registered


def test_a_request_interrupted_by_ctrl_c_is_taken_back(client: Client, tmp_path: Path) -> None:
    holder = register(client, "holder", (0, 1), (0, 1))
    waiter = register(client, "waiter", (0, 1), (0, 1))
    assert client.request(holder, "actor_train", 1) == (0, 1)
    timer = threading.Timer(1.0, _thread.interrupt_main)  # Ctrl-C while the request waits
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        client.request(waiter, "actor_train", 1)
    timer.join()
    client.release(holder, "actor_train")
    time.sleep(0.5)
    assert client.snapshot()["holders"] == {}  # not granted to a caller that stopped waiting
    assert client.request(waiter, "actor_train", 1) == (0, 1)  # asking again is not refused
    client.release(waiter, "actor_train")
    for done in (holder, waiter):
        client.remove_pipeline(done)
    _folder_holds(client, tmp_path / "run")


def test_an_orchestrator_that_cannot_start_says_why_and_leaves_its_name_free(ray_session: object) -> None:
    from rlix.executor.api import init, start_orchestrator
    from rlix.executor.placement import PlacementError
    from rlix.policy import Topology

    # This process runs Ray already, with 4 GPUs: 8 cannot be had by asking rlix for them.
    with pytest.raises(PlacementError) as error:
        init(num_gpus=8)
    text = _one_line(error)
    assert "the Ray cluster has 1 alive node(s) with [4] GPUs, 0 of them with at least 8" in text
    assert "call rlix.init before ray.init, or start Ray with ray.init(num_gpus=8)" in text
    handle = start_orchestrator(Topology(1, 4))  # the failed one's name is free again
    client = init(num_gpus=4)
    assert client.snapshot()["holders"] == {}
    ray.get(handle.shutdown.remote())
    ray.kill(handle)
