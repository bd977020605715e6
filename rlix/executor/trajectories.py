"""Trajectories and a pipeline's rollout queue (plain Python: no Ray, no torch).

A trajectory is one sample of one prompt of one rollout batch (adapter, step). It is handed to
a rollout rank, comes back complete or cut short (the rank was shrunk, or its worker died), and
in the second case goes back to the front of the queue with the tokens it already has, so a
shrink never loses work: the next rank resumes from that prefix (recomputing its cache) when
the backend can, else starts it over. Each pass through a rank is an *attempt*, one row of the
run's `rollouts` table.

The queue knows how much rollout work each adapter still has (trajectories queued or running),
which is what the pipeline reports to the core as rollout progress, and when a batch is
complete.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from rlix.runs.recorder import ROLLOUT_COLUMNS


@dataclass
class Trajectory:
    pipeline_id: str
    adapter: str
    step: int
    trajectory_id: int
    #: Index of its prompt in the batch (samples of one prompt form a GRPO group).
    group: int
    #: Whatever the backend needs to start generating (token ids, or a task item).
    prompt: Any
    prompt_tokens: int
    #: Tokens generated so far (kept across attempts).
    response: list[int] = field(default_factory=list)
    done: bool = False
    #: Weight version that generated its oldest tokens (-1: nothing generated yet).
    weight_version: int = -1
    preemptions: int = 0
    #: The workload's per-trajectory results (reward, log-probs, ...).
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.adapter, self.step, self.trajectory_id)


@dataclass
class Attempt:
    """What one rank did with one trajectory: the trajectory as it came back, and how."""

    trajectory: Trajectory
    dp_rank: int
    weight_version: int
    t_start: float
    t_end: float
    #: Prefix tokens whose cache the rank had to recompute to resume.
    recomputed_tokens: int = 0


def attempt_columns(attempts: list[Attempt], status_of: dict[int, str] | None = None) -> dict[str, list[Any]]:
    """Rows of the `rollouts` table, column by column. The status is `completed` for a finished
    trajectory and `requeued` otherwise, unless `status_of[id(attempt)]` says else."""
    columns: dict[str, list[Any]] = {name: [] for name in ROLLOUT_COLUMNS}
    for attempt in attempts:
        t = attempt.trajectory
        status = (status_of or {}).get(id(attempt)) or ("completed" if t.done else "requeued")
        row = {
            "pipeline_id": t.pipeline_id, "adapter": t.adapter, "trajectory_id": t.trajectory_id,
            "step_consumed": t.step, "weight_version": attempt.weight_version,
            "prompt_tokens": t.prompt_tokens, "response_tokens": len(t.response),
            "t_start": attempt.t_start, "t_end": attempt.t_end, "preemptions": t.preemptions,
            "status": status, "dp_rank": attempt.dp_rank, "recomputed_tokens": attempt.recomputed_tokens,
        }
        for name in ROLLOUT_COLUMNS:
            columns[name].append(row[name])
    return columns


@dataclass
class _Batch:
    trajectories: list[Trajectory]
    num_done: int = 0


class RolloutQueue:
    """Trajectories waiting for a rank, by batch; front = oldest batch, re-queued ones first."""

    def __init__(self) -> None:
        self._waiting: deque[Trajectory] = deque()
        self._batches: dict[tuple[str, int], _Batch] = {}
        self._running: dict[tuple[str, int, int], Trajectory] = {}
        self._remaining: dict[str, int] = {}
        self.changed = asyncio.Event()

    def submit(self, trajectories: list[Trajectory]) -> None:
        """A new batch (all trajectories share adapter and step)."""
        if not trajectories:
            raise ValueError("a rollout batch needs at least one trajectory")
        first = trajectories[0]
        key = (first.adapter, first.step)
        if key in self._batches:
            raise ValueError(f"batch {key} was submitted twice")
        self._batches[key] = _Batch(list(trajectories))
        self._waiting.extend(trajectories)
        self._remaining[first.adapter] = self._remaining.get(first.adapter, 0) + len(trajectories)
        self.changed.set()

    def take(self, max_items: int) -> list[Trajectory]:
        """Up to `max_items` waiting trajectories of one adapter (the adapter at the front)."""
        if not self._waiting:
            return []
        adapter = self._waiting[0].adapter
        taken: list[Trajectory] = []
        kept: deque[Trajectory] = deque()
        while self._waiting and len(taken) < max_items:
            t = self._waiting.popleft()
            (taken if t.adapter == adapter else kept).append(t)
        self._waiting.extendleft(reversed(kept))
        for t in taken:
            self._running[t.key] = t
        return taken

    def put_back(self, trajectories: list[Trajectory]) -> None:
        """Unfinished trajectories go back to the front, in their order, with their prefixes."""
        for t in trajectories:
            if t.done:
                raise ValueError(f"trajectory {t.key} is complete; it cannot be re-queued")
            self._running.pop(t.key, None)
            t.preemptions += 1
        self._waiting.extendleft(reversed(trajectories))
        if trajectories:
            self.changed.set()

    def complete(self, trajectories: list[Trajectory]) -> list[tuple[str, int]]:
        """Finished trajectories; returns the keys of batches that are now complete."""
        done_batches = []
        for t in trajectories:
            if not t.done or self._running.pop(t.key, None) is None:
                raise ValueError(f"trajectory {t.key} is not a running trajectory that finished")
            batch = self._batches[(t.adapter, t.step)]
            # The object handed back may be a copy (it went through Ray): keep the finished one.
            index = next(i for i, b in enumerate(batch.trajectories) if b.trajectory_id == t.trajectory_id)
            batch.trajectories[index] = t
            batch.num_done += 1
            self._remaining[t.adapter] -= 1
            if batch.num_done == len(batch.trajectories):
                done_batches.append((t.adapter, t.step))
        if trajectories:
            self.changed.set()
        return done_batches

    def batch(self, adapter: str, step: int) -> list[Trajectory]:
        return list(self._batches[(adapter, step)].trajectories)

    def remaining(self) -> dict[str, int]:
        """Trajectories queued or running, per adapter that has had a batch."""
        return dict(self._remaining)

    def running(self) -> list[Trajectory]:
        return list(self._running.values())

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_open(self) -> int:
        """Trajectories queued or running, of every adapter."""
        return len(self._waiting) + len(self._running)
