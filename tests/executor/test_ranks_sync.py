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


async def _idle_rank(fetch_s: float) -> tuple[Ranks, SleepyWorker]:
    """Rank 0 awake at version 0 with nothing queued, version 1 just published."""
    ranks = Ranks(_pipeline(RolloutQueue(), asyncio.get_running_loop()))
    worker = SleepyWorker(fetch_s)
    ranks.workers[0] = worker
    ranks.published("base", 0, ["v0"])
    await ranks.expand(0, (0,))
    ranks.published("base", 1, ["v1"])
    return ranks, worker


def test_a_shrink_during_a_sync_waits_for_it() -> None:
    async def run() -> SleepyWorker:
        ranks, worker = await _idle_rank(fetch_s=0.2)
        sync = asyncio.ensure_future(ranks.sync_idle())
        await asyncio.sleep(0.05)  # the update is fetching its weights
        await asyncio.gather(sync, ranks.shrink(0))
        return worker

    worker = asyncio.run(run())
    assert worker.updates == [1] and not worker.loaded


def test_a_sync_after_the_shrink_began_leaves_the_sleeping_rank_alone() -> None:
    async def run() -> SleepyWorker:
        ranks, worker = await _idle_rank(fetch_s=0.0)
        rank = ranks.active[0]
        shrink = asyncio.ensure_future(ranks.shrink(0))
        await asyncio.sleep(0)  # the shrink has taken the rank out of the active ones
        await asyncio.gather(shrink, ranks._sync_locked_rank(rank))
        return worker

    worker = asyncio.run(run())
    assert worker.updates == [] and not worker.loaded  # its next wake loads version 1
