"""How many trajectories a rollout rank takes a call (`Ranks._call_size`), as a scenario's
`engine:` says: up to `max_batch` from the shared queue, or with `balance` an even share of
those queued or running over the ranks, expanding ones counted, as the simulator's engines
admit them. Fake workers in place of the Ray actors; no Ray cluster, no model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rlix.executor.ranks import Ranks
from rlix.executor.trajectories import RolloutQueue, Trajectory
from tests.executor.test_drain import FakeWorker, _pipeline


class CountingWorker(FakeWorker):
    """A call that lasts until the rank is stopped; records how many trajectories it got."""

    def __init__(self) -> None:
        super().__init__(call_s=60.0)
        self.sizes: list[int] = []

    async def _generate(self, items: list[Trajectory]) -> list[Any]:
        self.sizes.append(len(items))
        return await super()._generate(items)


async def _first_calls(num_trajectories: int, num_ranks: int, max_batch: int, balance: bool) -> list[int]:
    """Each rank's first call's size, the ranks expanded together onto a queue of one batch."""
    loop = asyncio.get_running_loop()
    queue = RolloutQueue()
    queue.submit([Trajectory("p", "base", 0, i, i // 4, prompt=None, prompt_tokens=4)
                  for i in range(num_trajectories)])
    pipeline = _pipeline(queue, loop)
    pipeline.setup.max_batch_per_rank, pipeline.setup.balance = max_batch, balance
    ranks = Ranks(pipeline)
    workers = [CountingWorker() for _ in range(num_ranks)]
    for dp_rank, worker in enumerate(workers):
        ranks.workers[dp_rank] = worker
    await asyncio.gather(*(ranks.expand(r, (r,)) for r in range(num_ranks)))
    await asyncio.sleep(0.05)  # every rank's loop has taken its first call
    for dp_rank in range(num_ranks):
        await ranks.shrink(dp_rank)
    return [w.sizes[0] if w.sizes else 0 for w in workers]


@pytest.mark.parametrize(("num_trajectories", "num_ranks", "max_batch", "balance", "sizes"), [
    (16, 4, 8, False, [8, 8, 0, 0]),  # the first ranks fill up; the others find nothing
    (16, 4, 8, True, [4, 4, 4, 4]),   # an even share: ceil(16 / 4), then ceil(12 / ...)...
    (10, 4, 8, True, [3, 3, 3, 1]),   # ceil(10 / 4) = 3 each while 10 are open; the last gets what is left
    (64, 4, 8, True, [8, 8, 8, 8]),   # the share is above max_batch: max_batch
    (3, 4, 8, True, [1, 1, 1, 0]),    # fewer than the ranks: one each
])
def test_a_call_takes_max_batch_or_an_even_share(num_trajectories: int, num_ranks: int, max_batch: int,
                                                 balance: bool, sizes: list[int]) -> None:
    assert asyncio.run(_first_calls(num_trajectories, num_ranks, max_batch, balance)) == sizes
