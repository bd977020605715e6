"""The orchestrator's bookkeeping: one record per pipeline, and the rollout attempts of the run.

A pipeline's record knows how to reach it (its handler actor, its pipeline actor if it runs a
program), the actors to end for sure when it is removed (`adopted`), the calls waiting for it
(so a removed pipeline leaves nothing suspended), and, for API pipelines, the `request` calls
waiting for a grant and the active ranks when there is no handler to tell.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from rlix.policy import decisions as dec
from rlix.policy.specs import PipelineSpec
from rlix.runs.host import Host
from rlix.runs.recorder import ROLLOUT_COLUMNS, Recorder


class AsyncioFutures:
    """The `rlix.runs.Futures` of the executor: asyncio futures of the orchestrator's loop."""

    def new(self) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()

    def resolve(self, future: asyncio.Future[Any], value: Any) -> None:
        if not future.done():
            future.set_result(value)


@dataclass
class PipelineRecord:
    pipeline_id: str
    spec: PipelineSpec
    handler: Any = None
    #: How long an API handler's expand or shrink may take before the pipeline is taken for
    #: hung and killed (None: forever). A program's actor is rlix's own and has none.
    handler_timeout_s: float | None = None
    actor: Any = None
    host: Host[asyncio.Future[Any]] | None = None
    adopted: list[Any] = field(default_factory=list)
    status: str = "running"  # running, finished, failed, killed
    error: str = ""
    admitted: bool = False
    removing: bool = False
    supervisor: asyncio.Task[None] | None = None
    waits: set[asyncio.Future[Any]] = field(default_factory=set)
    grant_waiters: dict[str, asyncio.Future[Any]] = field(default_factory=dict)
    ranks: dict[int, tuple[int, ...]] = field(default_factory=dict)
    #: An API pipeline's clock of steps: when it was admitted, and when each adapter's last
    #: step ended (the start of its next step's row).
    admitted_s: float = 0.0
    step_ends: dict[str, float] = field(default_factory=dict)
    #: An API pipeline's requests not granted yet: cluster -> (priority, when), for its waits.
    requested_at: dict[str, tuple[int, float]] = field(default_factory=dict)

    @property
    def alive(self) -> bool:
        return self.status == "running" and not self.removing

    def granted(self, cluster: str, gpus: tuple[int, ...]) -> None:
        """An API request's grant was applied: its `request` call returns the GPUs."""
        future = self.grant_waiters.pop(cluster, None)
        if future is not None and not future.done():
            future.set_result(tuple(gpus))

    def track_rank(self, decision: dec.Expand | dec.Shrink | dec.Revoke) -> None:
        if isinstance(decision, dec.Expand):
            self.ranks[decision.dp_rank] = tuple(decision.gpus)
        else:
            self.ranks.pop(decision.dp_rank, None)

    def cancel_waits(self, reason: str) -> None:
        for future in [*self.waits, *self.grant_waiters.values()]:
            if not future.done():
                future.set_exception(RuntimeError(f"pipeline {self.pipeline_id} {reason}"))
        self.waits.clear()
        self.grant_waiters.clear()


class RolloutBook:
    """Adds rollout attempts to the recorder and remembers each trajectory's last status, so
    trajectories re-queued by a pipeline that then failed are closed as `aborted`."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self._last: dict[tuple[str, str, int], dict[str, Any]] = {}

    def add(self, columns: dict[str, list[Any]]) -> None:
        self.recorder.add_rollouts(columns)
        num_rows = len(columns["pipeline_id"])
        for i in range(num_rows):
            row = {name: columns[name][i] for name in ROLLOUT_COLUMNS}
            self._last[(row["pipeline_id"], row["adapter"], row["trajectory_id"])] = row

    def abort(self, pipeline_id: str, now: float) -> int:
        """Close the pipeline's re-queued trajectories as aborted; returns how many."""
        rows = [r for (pid, _a, _t), r in self._last.items() if pid == pipeline_id and r["status"] == "requeued"]
        if rows:
            aborted = [{**r, "status": "aborted", "t_start": now, "t_end": now, "recomputed_tokens": 0} for r in rows]
            self.add({name: [r[name] for r in aborted] for name in ROLLOUT_COLUMNS})
        return len(rows)

    def counts(self) -> dict[str, int]:
        """Trajectories by last status."""
        out: dict[str, int] = {}
        for row in self._last.values():
            out[row["status"]] = out.get(row["status"], 0) + 1
        return out
