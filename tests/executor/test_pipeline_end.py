"""The end of a pipeline with several program threads: the pipeline actor ends only once the
orchestrator has heard every thread finish. A thread whose report returned while the last
thread was still tearing down ended a resumed live run as failed ("its program ended with
threads still counted"). A fake orchestrator in place of the Ray actor; no Ray cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

from rlix.executor.pipeline import PipelineActor
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
