"""The end of a pipeline with several program threads: the pipeline actor ends only once the
orchestrator has heard every thread finish. A thread whose report returned while the last
thread was still tearing down ended a resumed live run as failed ("its program ended with
threads still counted"). And what its teardown keeps: the trainers' models, or, for a pipeline
resumed past its last step (no trainer started), its checkpoint's. Fakes in place of the Ray
actors; no Ray cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from types import SimpleNamespace
from typing import Any

import pytest

from rlix.executor.pipeline import PipelineActor
from rlix.executor.workload import ResumeFrom
from rlix.pipelines import AdapterConfig, ProgramConfig
from rlix.policy.specs import PipelineKind
from tests.executor.test_drain import _Remote


def _no_ops() -> Generator[Any, Any, None]:
    return
    yield


def test_the_pipeline_ends_after_the_last_threads_report() -> None:
    heard: list[str] = []

    async def thread_finished(pipeline_id: str, thread: str) -> None:
        await asyncio.sleep(0.05 if thread == "early" else 0.0)
        heard.append(thread)

    async def teardown() -> None:
        await asyncio.sleep(0.2)  # the last thread's end: its ranks' workers stopped

    async def flush() -> None:
        return None

    async def run() -> list[str]:
        actor = PipelineActor.__new__(PipelineActor)
        actor.pipeline_id = "p"
        actor.orch = type("Orch", (), {"thread_finished": _Remote(thread_finished)})()
        actor._num_threads = 2
        actor._done = asyncio.get_running_loop().create_future()
        actor._teardown = teardown  # type: ignore[method-assign]
        actor.flush = flush  # type: ignore[method-assign]
        early = asyncio.ensure_future(actor._thread(_no_ops(), "early"))
        await asyncio.sleep(0.01)  # its report is on its way when the last thread ends
        last = asyncio.ensure_future(actor._thread(_no_ops(), "last"))
        await actor._done
        seen = list(heard)
        await asyncio.gather(early, last)
        return seen

    assert asyncio.run(run()) == ["early", "last"]


def _torn_down(trainers: dict[str, Any], finished: bool, checkpoint: str | None) -> list[tuple[str, Any]]:
    """What a pipeline's teardown asked its workload to write (fake ranks, trainers, workload;
    the trainers' kill is patched out by the test)."""
    asked: list[tuple[str, Any]] = []

    async def save_models(got: dict[str, Any], folder: str) -> None:
        asked.append(("save_models", (sorted(got), folder)))

    async def models_from_checkpoint(path: str, folder: str) -> None:
        asked.append(("models_from_checkpoint", (path, folder)))

    async def stop_all() -> None:
        return None

    start = 3 if finished else 2
    program = ProgramConfig("p", PipelineKind.FULL_FINETUNE, (AdapterConfig("base", 3, 0),),
                            start_steps=(("base", start),))
    actor = PipelineActor.__new__(PipelineActor)
    actor.pipeline_id = "p"
    actor.setup = SimpleNamespace(models_dir="models/p", program=program,  # type: ignore[assignment]
                                  resume=ResumeFrom(checkpoint))
    actor.workload = SimpleNamespace(save_models=save_models,  # type: ignore[assignment]
                                     models_from_checkpoint=models_from_checkpoint)
    actor.ranks = SimpleNamespace(stop_all=stop_all)  # type: ignore[assignment]
    actor.trainers = dict(trainers)
    asyncio.run(actor._teardown())
    return asked


def test_a_pipeline_resumed_past_its_last_step_keeps_its_checkpoints_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """It started no trainer: its models are the checkpoint's (no trainer started to save them)."""
    async def killed(handles: list[Any]) -> list[Any]:
        return []

    monkeypatch.setattr("rlix.executor.pipeline.kill_and_confirm", killed)
    assert _torn_down({}, finished=True, checkpoint="ckpt") == [("models_from_checkpoint", ("ckpt", "models/p"))]
    assert _torn_down({}, finished=False, checkpoint="ckpt") == []  # ended before its init: nothing trained
    assert _torn_down({}, finished=True, checkpoint=None) == []
    assert _torn_down({"actor_train": None}, finished=False, checkpoint="ckpt") == [
        ("save_models", (["actor_train"], "models/p"))]
