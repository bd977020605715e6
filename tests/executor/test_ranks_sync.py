"""A publish's weight sync and a shrink of the same idle rank, at once: the sync must not reach
the engine after the shrink has put it to sleep (the hf and vLLM backends refuse a full weight
update on an offloaded rank, which failed the pipeline). Fake workers in place of the Ray
actors; no Ray cluster, no model."""

from __future__ import annotations

import asyncio
from typing import Any

from rlix.executor.ranks import Ranks
from rlix.executor.trajectories import RolloutQueue
from tests.executor.test_drain import _pipeline, _Remote


class SleepyWorker:
    """An engine that is loaded or not; an update fetches its weights first (a Ray object
    fetch takes a moment), then refuses an engine that is asleep, as the real backends do."""

    def __init__(self, fetch_s: float) -> None:
        self.fetch_s = fetch_s
        self.loaded = False
        self.updates: list[int] = []
        self.wake, self.sleep = _Remote(self._wake), _Remote(self._sleep)
        self.update, self.stop = _Remote(self._update), _Remote(self._stop)

    async def _wake(self, weights: dict[str, Any]) -> None:
        self.loaded = True

    async def _sleep(self) -> None:
        self.loaded = False

    async def _stop(self) -> None:
        return None

    async def _update(self, adapter: str, version: int, ref: list[Any]) -> None:
        await asyncio.sleep(self.fetch_s)
        if not self.loaded:
            raise RuntimeError("update_weights on an offloaded rank")
        self.updates.append(version)


async def _sync_and_shrink(fetch_s: float, shrink_after_s: float) -> SleepyWorker:
    loop = asyncio.get_running_loop()
    ranks = Ranks(_pipeline(RolloutQueue(), loop))
    worker = SleepyWorker(fetch_s)
    ranks.workers[0] = worker
    ranks.published("base", 0, ["v0"])
    await ranks.expand(0, (0,))  # idle: nothing queued
    ranks.published("base", 1, ["v1"])
    sync = asyncio.ensure_future(ranks.sync_idle())
    await asyncio.sleep(shrink_after_s)
    await asyncio.gather(sync, ranks.shrink(0))
    return worker


def test_a_shrink_during_a_sync_waits_for_it() -> None:
    worker = asyncio.run(_sync_and_shrink(fetch_s=0.2, shrink_after_s=0.05))
    assert worker.updates == [1] and not worker.loaded


def test_a_sync_after_the_shrink_began_leaves_the_sleeping_rank_alone() -> None:
    async def run() -> SleepyWorker:
        loop = asyncio.get_running_loop()
        ranks = Ranks(_pipeline(RolloutQueue(), loop))
        worker = SleepyWorker(fetch_s=0.0)
        ranks.workers[0] = worker
        ranks.published("base", 0, ["v0"])
        await ranks.expand(0, (0,))
        rank = ranks.active[0]
        shrink = asyncio.ensure_future(ranks.shrink(0))
        await asyncio.sleep(0)  # the shrink has taken the rank out of the active ones
        ranks.published("base", 1, ["v1"])
        await asyncio.gather(shrink, ranks._sync_locked_rank(rank))
        return worker

    worker = asyncio.run(run())
    assert worker.updates == [] and not worker.loaded  # its next wake loads version 1
