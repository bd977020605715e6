"""A rollout worker that died asleep and was never woken again is still a fault the run's
summary lists: `Ranks` finds it when it takes the workers' CPU accounts at the pipeline's end.
Fake workers in place of the Ray actors; no Ray cluster, no model."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from ray.exceptions import RayActorError

from rlix.executor.ranks import Ranks
from rlix.executor.trajectories import RolloutQueue
from tests.executor.test_drain import _Remote


def _worker(account: dict[str, float] | None) -> Any:
    async def cpu_account() -> dict[str, float]:
        if account is None:
            raise RayActorError()
        return account

    return SimpleNamespace(cpu_account=_Remote(cpu_account))


def test_a_worker_found_dead_at_the_end_is_a_fault_and_the_live_ones_are_accounted() -> None:
    faults: list[tuple[str, str]] = []
    accounts: list[dict[str, float]] = []
    pipeline = SimpleNamespace(queue=RolloutQueue(), fault=lambda kind, detail: faults.append((kind, detail)),
                               worker_cpu=accounts.append, pipeline_id="p")
    ranks = Ranks(pipeline)  # type: ignore[arg-type]
    ranks.workers = {0: _worker({"cpu_s": 1.0}), 1: _worker(None), 2: _worker({"cpu_s": 2.0})}
    asyncio.run(ranks._account_cpu())
    assert accounts == [{"cpu_s": 1.0}, {"cpu_s": 2.0}]
    assert [kind for kind, _ in faults] == ["rollout_worker_died"]
    assert faults[0][1].startswith("rank 1: its sleeping worker had died")
