"""A pipeline's end and an expansion the core decided before it heard of that end, meeting in
the pipeline actor: the end waits for an expansion under way, one that comes after the end
began wakes nothing, and neither reports a fault (a live run reported the workers its own end
had killed as dead). A worker that dies mid-call while its rank is being shrunk, or between
calls and is found dead by the shrink, is reported once and replaced at the rank's next
expansion; a worker the end itself kills while its rank is being shrunk is no fault. Fake
workers in place of the Ray actors; no Ray cluster, no model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from ray.exceptions import RayActorError

from rlix.executor import ranks as ranks_module
from rlix.executor.ranks import Ranks
from rlix.executor.trajectories import RolloutQueue, Trajectory
from tests.executor.test_drain import _pipeline, _Remote


class Worker:
    """Wakes in `wake_s`; dead once killed (every call then raises as Ray does)."""

    def __init__(self, wake_s: float = 0.0, generate_s: float = 0.0, sleep_s: float = 0.0) -> None:
        self.wake_s, self.generate_s, self.sleep_s = wake_s, generate_s, sleep_s
        self.dead = False
        self.wakes = 0
        self.wake, self.sleep = _Remote(self._wake), _Remote(self._sleep)
        self.stop, self.cpu_account = _Remote(self._call), _Remote(self._account)
        self.generate = _Remote(self._generate)

    async def _wake(self, weights: dict[str, Any]) -> None:
        await asyncio.sleep(self.wake_s)
        await self._call()
        self.wakes += 1

    async def _call(self) -> None:
        if self.dead:
            raise RayActorError()

    async def _sleep(self) -> None:
        await asyncio.sleep(self.sleep_s)
        await self._call()

    async def _account(self) -> dict[str, float]:
        await asyncio.sleep(0.1)  # the end's first await: an expansion may come meanwhile
        await self._call()
        return {"cpu_s": 1.0}

    async def _generate(self, items: list[Trajectory]) -> list[Any]:
        await asyncio.sleep(self.generate_s)
        await self._call()
        return []


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> list[Worker]:
    """Workers started by `Ranks` (at an expansion) land here; a kill marks workers dead."""
    started: list[Worker] = []

    async def new_worker(self: Ranks, dp_rank: int, gpus: tuple[int, ...]) -> Worker:
        worker = Worker()
        self.workers[dp_rank] = worker
        started.append(worker)
        return worker

    async def kill(handles: Any, timeout_s: float = 30.0) -> list[Any]:
        for handle in handles:
            handle.dead = True
        return []

    monkeypatch.setattr(Ranks, "_new_worker", new_worker)
    monkeypatch.setattr(ranks_module, "kill_and_confirm", kill)
    return started


def _ranks(faults: list[str], queue: RolloutQueue | None = None) -> Ranks:
    pipeline = _pipeline(queue or RolloutQueue(), asyncio.get_running_loop())
    pipeline.fault = lambda kind, detail: faults.append(detail)
    return Ranks(pipeline)


def test_an_expansion_after_the_end_began_wakes_nothing(fakes: list[Worker]) -> None:
    async def run() -> tuple[Ranks, list[str], Worker]:
        faults: list[str] = []
        ranks = _ranks(faults)
        asleep = Worker()
        ranks.workers = {0: Worker(), 1: asleep}
        await ranks.expand(0, (0,))
        end = asyncio.ensure_future(ranks.stop_all())
        await asyncio.sleep(0.05)  # the end is taking the workers' accounts
        await ranks.expand(1, (1,))
        await end
        await ranks.expand(1, (1,))  # and after it: nothing either
        return ranks, faults, asleep

    ranks, faults, asleep = asyncio.run(run())
    assert faults == [] and fakes == [] and asleep.wakes == 0
    assert not ranks.active and not ranks.workers


def test_the_end_waits_for_an_expansion_under_way(fakes: list[Worker]) -> None:
    async def run() -> tuple[Ranks, list[str], Worker]:
        faults: list[str] = []
        ranks = _ranks(faults)
        waking = Worker(wake_s=0.2)
        ranks.workers = {0: waking}
        expansion = asyncio.ensure_future(ranks.expand(0, (0,)))
        await asyncio.sleep(0.05)  # the worker is loading its weights
        await asyncio.gather(expansion, ranks.stop_all())
        return ranks, faults, waking

    ranks, faults, waking = asyncio.run(run())
    assert faults == [] and fakes == [] and waking.wakes == 1 and waking.dead
    assert not ranks.active and not ranks.workers


def test_a_death_during_a_shrink_is_reported_once_and_the_next_expansion_starts_a_worker(fakes: list[Worker]) -> None:
    async def run() -> tuple[Ranks, list[str], Worker]:
        faults: list[str] = []
        queue = RolloutQueue()
        queue.submit([Trajectory("p", "base", 0, i, i, prompt=None, prompt_tokens=4) for i in range(4)])
        ranks = _ranks(faults, queue)
        dying = Worker(generate_s=0.2)
        ranks.workers = {0: dying}
        await ranks.expand(0, (0,))
        await asyncio.sleep(0.05)  # generating
        dying.dead = True  # dies mid-call, as the shrink comes
        await ranks.shrink(0)
        await ranks.expand(0, (0,))
        return ranks, faults, dying

    ranks, faults, dying = asyncio.run(run())
    assert len(faults) == 1 and "died mid-call" in faults[0], faults
    assert len(fakes) == 1 and fakes[0].wakes == 1 and ranks.workers == {0: fakes[0]}
    assert ranks.num_restarts == 1


def test_a_death_found_by_a_shrink_of_an_idle_rank_is_reported_once(fakes: list[Worker]) -> None:
    """A worker killed between two calls (its rank waiting for work) is first found dead by
    the shrink's sleep: a fault the run survived, noted once (a CI run's summary missed it)."""
    async def run() -> tuple[Ranks, list[str]]:
        faults: list[str] = []
        ranks = _ranks(faults)  # an empty queue: the rank's loop waits for work
        dying = Worker()
        ranks.workers = {0: dying}
        await ranks.expand(0, (0,))
        await asyncio.sleep(0.05)
        dying.dead = True
        await ranks.shrink(0)
        await ranks.expand(0, (0,))
        await ranks.shrink(0)  # the new worker lives: nothing more to report
        return ranks, faults

    ranks, faults = asyncio.run(run())
    assert len(faults) == 1 and "found dead when the rank was shrunk" in faults[0], faults
    assert len(fakes) == 1 and fakes[0].wakes == 1 and ranks.num_restarts == 1


@pytest.mark.parametrize("busy", [False, True])
def test_a_worker_the_end_kills_while_its_rank_is_shrunk_is_no_fault(
    fakes: list[Worker], monkeypatch: pytest.MonkeyPatch, busy: bool
) -> None:
    """The end kills every worker while a shrink is still under way: the shrink's sleep call
    (`busy` False: the rank waited for work), or the call the rank was draining (`busy`: it
    was generating), then fails. Neither is a worker that died (a CI run's summary listed one).
    The kill takes a while to be confirmed, as Ray's does, so the end still knows the worker."""
    async def slow_kill(handles: Any, timeout_s: float = 30.0) -> list[Any]:
        for handle in handles:
            handle.dead = True
        await asyncio.sleep(0.3)
        return []

    monkeypatch.setattr(ranks_module, "kill_and_confirm", slow_kill)

    async def run() -> tuple[Ranks, list[str]]:
        faults: list[str] = []
        queue = RolloutQueue()
        if busy:
            queue.submit([Trajectory("p", "base", 0, i, i, prompt=None, prompt_tokens=4) for i in range(4)])
        ranks = _ranks(faults, queue)
        ranks.workers = {0: Worker(generate_s=0.4, sleep_s=0.4)}
        await ranks.expand(0, (0,))
        await asyncio.sleep(0.05)
        shrink = asyncio.ensure_future(ranks.shrink(0, drain_s=1.0 if busy else 0.0))
        await asyncio.sleep(0.05)
        await asyncio.gather(shrink, ranks.stop_all())
        return ranks, faults

    ranks, faults = asyncio.run(run())
    assert faults == [] and not ranks.workers


def test_an_expansion_the_end_gives_up_on_is_no_fault_and_starts_no_worker(
    fakes: list[Worker], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end waits for an expansion under way only so long, then kills the workers: the
    wake it cut short is no death to report, and no worker is started in its place."""
    monkeypatch.setattr(ranks_module, "END_WAITS_FOR_EXPANSION_S", 0.1)

    async def run() -> tuple[Ranks, list[str]]:
        faults: list[str] = []
        ranks = _ranks(faults)
        ranks.workers = {0: Worker(wake_s=0.5)}
        expansion = asyncio.ensure_future(ranks.expand(0, (0,)))
        await asyncio.sleep(0.05)
        await asyncio.gather(expansion, ranks.stop_all())
        return ranks, faults

    ranks, faults = asyncio.run(run())
    assert faults == [] and fakes == [] and not ranks.active
