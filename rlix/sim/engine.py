"""Rollout engines for the simulator, advanced in closed form between admissions and completions.

One `RolloutGroup` per pipeline holds that pipeline's FIFO queue of waiting trajectories and one
engine per active data-parallel rollout rank. In front of the ranks sits a load-balancing router,
as RL rollout systems put one in front of their data-parallel inference ranks (least-loaded
dispatch), and, like Seer's divided rollout (arXiv 2511.14617), it moves running requests to a
rank that joins:

- even share (`balance`): a rank admits only while it runs fewer than
  `cap = min(max_batch, ceil(R / E))`, R the trajectories queued or running in the group, E its
  engines (those still loading count: ranks expanded together split the work evenly);
- migration (`migrate_on_expand`): when a rank is added, every other engine, at its first
  iteration boundary at or after the new rank's ready time, sends the most recently admitted
  sequences it runs above `cap` back to the queue front, exactly like a preemption (prefix
  kept, recomputed on resume, a "requeued" attempt), so the new rank gets work at once.

With both off, each engine admits up to `max_batch` from the shared queue. An engine batches
continuously (vLLM-style):

- at each iteration boundary, finished sequences leave; a pending migration sheds; free slots
  (below `cap`) are refilled from the queue
  head while the KV cache would still hold the next iteration with a watermark to spare
  (`K + b + need + 1 <= capacity - watermark`; strict FIFO: a head that does not fit blocks
  the queue); then, while `K + b > capacity`, the most recently admitted sequence is preempted
  to the queue front, keeping its generated prefix. The watermark (1% of the cache by default)
  is vLLM's block manager's (`watermark=0.01`; Vidur models it as
  `vllm_scheduler_watermark_blocks_fraction`): without it, a saturated cache preempts almost
  every admission a few iterations later, the recompute thrash vLLM keeps it for;
- the next iteration decodes one token for every running sequence and takes
  `alpha(b) + beta * K` plus, when sequences were admitted at that boundary, the compute of
  their prefill (prompt + any resumed prefix, which counts as recomputed tokens). Prefills ride
  in the decode step, as vLLM's chunked prefill does;
- an idle engine (nothing running) starts a boundary as soon as the queue has work and it is
  ready; a running engine with a free slot looks at the queue at each of its boundaries.

Between events the batch size b is fixed and K grows by b per iteration, so m iterations from
a base (t0, K) take `extra + m*alpha(b) + beta*(m*K + b*m*(m-1)/2)`; an engine keeps a counter
of iterations and each running sequence the counter at which it finishes (a heap), so the next
event is found without stepping token by token. Events of all engines of a group are processed
in global (time, dp_rank) order, which is what makes the shared queue deterministic.

Attempt records (`drain_attempts`) are plain tuples in the order of `ATTEMPT_FIELDS`;
`drain_attempt_columns` gives them as numpy arrays, the simulator's fast path.
"""

from __future__ import annotations

import math
from collections import deque
from heapq import heapify, heappop
from itertools import chain
from typing import Any

import numpy as np

from rlix.sim.costs import CostModel
from rlix.sim.engine_compact import Compaction
from rlix.sim.engine_loop import EventLoop
from rlix.sim.engine_state import (
    COMPLETED,
    IDX_BITS,
    IDX_MASK,
    REQUEUED,
    STATUS_NAMES,
    Engine,
    boundary_at_or_before,
    time_at,
)

ATTEMPT_FIELDS = (
    "traj_id",
    "dp_rank",
    "t_start",
    "t_end",
    "generated_tokens",
    "recomputed_tokens",
    "status",
)
Attempt = tuple[int, int, float, float, int, int, str]
_NUM_FIELDS = len(ATTEMPT_FIELDS)
_FLOAT_FIELDS = ("t_start", "t_end")
STOP_REASONS = ("limit", "completions", "batch_done", "idle")
_INF = math.inf


class RolloutGroup(EventLoop, Compaction):
    """The rollout engines of one pipeline sharing one queue (see the module docstring)."""

    def __init__(
        self,
        costs: CostModel,
        tp: int,
        max_batch: int,
        kv_capacity_tokens: int,
        kv_watermark: float = 0.01,
        balance: bool = True,
        migrate_on_expand: bool = True,
    ) -> None:
        for name, value in (
            ("tp", tp),
            ("max_batch", max_batch),
            ("kv_capacity_tokens", kv_capacity_tokens),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"RolloutGroup {name} must be a positive integer, got {value!r}")
        self.costs = costs
        self.balance = bool(balance)
        self.migrate_on_expand = bool(migrate_on_expand)
        self.tp = int(tp)
        self.max_batch = int(max_batch)
        self.kv_capacity_tokens = int(kv_capacity_tokens)
        if not 0.0 <= kv_watermark < 1.0:
            raise ValueError(f"RolloutGroup kv_watermark must be in [0, 1), got {kv_watermark!r}")
        # Admission keeps this many KV tokens free; a trajectory must fit below it on its own.
        self.admit_limit_tokens = self.kv_capacity_tokens - int(
            self.kv_capacity_tokens * kv_watermark
        )
        coefficients = [costs.decode_coefficients(b, self.tp) for b in range(self.max_batch + 1)]
        self._alpha = [a for a, _ in coefficients]
        self._beta = coefficients[1][1]
        self._prefill_per_token_s = costs.prefill_compute_seconds(1, self.tp)
        # Per trajectory (internal index = submission order, less the done prefix that
        # `_own_lists` cuts), shared by copies until one of them submits (copy on write).
        self._tid: list[int] = []
        self._prompt: list[int] = []
        self._resp: list[int] = []
        self._batch: list[int] = []
        self._shared_lists = False
        # The queue: re-queued (index, generated prefix) pairs first, then fresh submissions
        # from index `_qhead` on.
        self._front: deque[tuple[int, int]] = deque()
        self._qhead = 0
        # Batches by dense slot (what `_batch` holds per trajectory): id and trajectories left;
        # `_batch_slot` finds the slot of a batch id not yet done.
        self._batch_ids: list[int] = []
        self._batch_left: list[int] = []
        self._batch_slot: dict[int, int] = {}
        self._done_batches: list[int] = []
        self._attempts: list[Attempt] = []
        self._busy: list[tuple[int, float, float]] = []
        self._engines: dict[int, Engine] = {}
        # (time, dp_rank, version, engine); an entry whose version is not its engine's is stale.
        self._events: list[tuple[float, int, int, Engine]] = []
        # Events made while the loop holds the heap's top entry; pushed right after.
        self._wakes: list[tuple[float, int, int, Engine]] = []
        # Ranks with a free slot after their last boundary (queue empty or head not fitting).
        self._hungry: dict[int, Engine] = {}
        # Trajectories queued or running (R of the even share).
        self._num_open = 0
        self.now = 0.0
        self._rebind()

    # -- inspection ------------------------------------------------------------------------

    @property
    def num_queued(self) -> int:
        return len(self._front) + len(self._tid) - self._qhead

    @property
    def num_running(self) -> int:
        return sum(e.b for e in self._engines.values())

    @property
    def num_remaining(self) -> int:
        """Trajectories queued or running (kept as a count: the driver asks at every stop)."""
        return self._num_open

    @property
    def engines(self) -> list[int]:
        return sorted(self._engines)

    @property
    def num_engines(self) -> int:
        return len(self._engines)

    def has_engine(self, dp_rank: int) -> bool:
        return dp_rank in self._engines

    def running_by_rank(self) -> dict[int, int]:
        """Sequences each engine runs (as of its last processed boundary)."""
        return {rank: e.b for rank, e in sorted(self._engines.items())}

    # -- inputs ----------------------------------------------------------------------------

    def submit(
        self, traj_ids: Any, prompt_tokens: Any, response_tokens: Any, batch_ids: Any
    ) -> None:
        """Append trajectories to the back of the queue at `now` (all four of equal length)."""
        cols = [np.asarray(c) for c in (traj_ids, prompt_tokens, response_tokens, batch_ids)]
        names = ("traj_ids", "prompt_tokens", "response_tokens", "batch_ids")
        for name, col in zip(names, cols, strict=True):
            if col.ndim != 1 or len(col) != len(cols[0]):
                raise ValueError(
                    f"submit: {name} must be 1-D with {len(cols[0])} entries, got shape {col.shape}"
                )
            if len(col) and not np.issubdtype(col.dtype, np.integer):
                raise ValueError(f"submit: {name} must be integers, got dtype {col.dtype}")
        ids, prompt, resp, batch = cols
        if not len(ids):
            return
        for name, col in (("prompt_tokens", prompt), ("response_tokens", resp)):
            bad = np.flatnonzero(col < 1)
            if len(bad):
                raise ValueError(
                    f"submit: trajectory {ids[bad[0]]} has {name}={col[bad[0]]} (must be >= 1)"
                )
        bad = np.flatnonzero(prompt.astype(np.int64) + resp > self.admit_limit_tokens)
        if len(bad):
            i = bad[0]
            raise ValueError(
                f"submit: trajectory {ids[i]} needs {prompt[i] + resp[i]} KV tokens, more than "
                f"a rank admits ({self.admit_limit_tokens} of {self.kv_capacity_tokens} less the watermark)"
            )
        if len(self._tid) + len(ids) > IDX_MASK:
            raise ValueError(f"submit: a group holds at most {IDX_MASK} trajectories")
        self._own_lists()
        self._rebind()
        was_empty = self.num_queued == 0
        self._num_open += len(ids)
        self._tid.extend(ids.tolist())
        self._prompt.extend(prompt.tolist())
        self._resp.extend(resp.tolist())
        slot_of = self._batch_slot
        values, inverse, counts = np.unique(batch, return_inverse=True, return_counts=True)
        slots = []
        for value, count in zip(values.tolist(), counts.tolist(), strict=True):
            slot = slot_of.get(value)
            if slot is None:
                slot = slot_of[value] = len(self._batch_ids)
                self._batch_ids.append(value)
                self._batch_left.append(0)
            self._batch_left[slot] += count
            slots.append(slot)
        self._batch.extend(np.asarray(slots, dtype=np.int64)[inverse].tolist())
        if was_empty or self.balance:  # the even share grew: a capped engine may take more
            self._wake_hungry(self.now, -1)
            self._flush_wakes()

    def add_engine(self, dp_rank: int, t_ready: float) -> None:
        """Start an engine for `dp_rank`; it takes work from `t_ready` on (after its weight load).
        With `migrate_on_expand`, the other engines shed what they run above the even share at
        their first boundary at or after `t_ready`."""
        if dp_rank in self._engines:
            raise ValueError(f"add_engine: dp_rank {dp_rank} already has an engine")
        if not t_ready >= self.now:
            raise ValueError(
                f"add_engine: t_ready {t_ready!r} is before the group's time {self.now!r}"
            )
        if self.migrate_on_expand:
            self._mark_migration(t_ready)
        e = Engine(dp_rank, t_ready)
        self._engines[dp_rank] = e
        self._schedule(e, t_ready, 0)
        self._flush_wakes()

    def remove_engine(self, dp_rank: int, t: float) -> int:
        """Stop `dp_rank`'s engine at `t`: sequences whose last token was done by `t` complete,
        the others go back to the queue front (admission order) with their generated prefix.
        Returns how many were re-queued."""
        e = self._engines.get(dp_rank)
        if e is None:
            raise ValueError(f"remove_engine: dp_rank {dp_rank} has no engine")
        self._check_advanced_to(t, "remove_engine")
        self.now = t
        del self._engines[dp_rank]
        e.version += 1  # its pending event is stale
        if e.hungry:
            del self._hungry[dp_rank]
        if e.busy_since is not None:
            self._busy.append((dp_rank, e.busy_since, t))
        if not e.info:
            if self.balance and self.num_queued:
                self._wake_hungry(t, -1)
                self._flush_wakes()
            return 0
        beta, alpha = self._beta, self._alpha[e.b]
        max_m = min(key for _, _, key in e.info.values()) >> IDX_BITS
        n = e.n0 + boundary_at_or_before(e, t, alpha, beta, max_m - e.n0)
        resp, tid, append = self._resp, self._tid, self._attempts.append
        requeued: list[tuple[int, int]] = []
        for idx, (g0, t_start, key) in e.info.items():  # admission order
            fin = key >> IDX_BITS
            if fin <= n:
                self._complete(idx, dp_rank, t_start, time_at(e, fin - e.n0, alpha, beta), g0)
                continue
            generated = n - (fin - resp[idx] + g0)
            append((tid[idx], dp_rank, t_start, t, generated, g0, REQUEUED))
            requeued.append((idx, g0 + generated))
        self._front.extendleft(reversed(requeued))
        # Requeued work, or (even share) a larger share for the engines left.
        if requeued or (self.balance and self.num_queued):
            self._wake_hungry(t, -1)
            self._flush_wakes()
        return len(requeued)

    # -- the event loop --------------------------------------------------------------------

    def advance(self, t_limit: float, max_completions: int | None = None) -> tuple[float, str]:
        """Process admissions and completions in (time, dp_rank) order up to `t_limit` inclusive.
        Stops right after the event that completes a batch ("batch_done", takes precedence) or
        that brings this call's completions to `max_completions` ("completions"); otherwise
        returns (t_limit, "limit"), or (t_limit, "idle") when nothing is running or queued.
        With t_limit = inf and nothing left to do, the time reached is the last event's."""
        if not t_limit >= self.now:
            raise ValueError(
                f"advance: t_limit {t_limit!r} is before the group's time {self.now!r}"
            )
        if max_completions is not None and max_completions < 1:
            raise ValueError(f"advance: max_completions must be >= 1, got {max_completions!r}")
        t, reason = self._run(t_limit, max_completions if max_completions is not None else -1)
        if reason:
            return t, reason
        # `_run` returns the last event's time when it ran out of events.
        self.now = t_limit if t_limit != _INF else t
        idle = not self.num_queued and not any(e.b for e in self._engines.values())
        return self.now, "idle" if idle else "limit"

    def _check_advanced_to(self, t: float, what: str) -> None:
        events = self._events
        while events and events[0][3].version != events[0][2]:
            heappop(events)
        if not t >= self.now or (events and events[0][0] < t):
            pending = events[0][0] if events else None
            raise ValueError(
                f"{what}: advance the group to t={t!r} first (now {self.now!r}, next event at {pending!r})"
            )

    # -- outputs ---------------------------------------------------------------------------

    def done_batches(self) -> list[int]:
        """Batch ids whose every trajectory completed since the last call."""
        done, self._done_batches = self._done_batches, []
        return done

    def drain_attempts(self) -> list[Attempt]:
        """Attempts finished since the last call, as tuples in `ATTEMPT_FIELDS` order."""
        attempts = [(*a[:6], STATUS_NAMES[a[6]]) for a in self._attempts]
        self._attempts.clear()  # in place: `_hot` holds its append
        return attempts  # type: ignore[return-value]

    def drain_attempt_columns(self) -> dict[str, np.ndarray] | None:
        """Attempts finished since the last call as arrays, the fields of `ATTEMPT_FIELDS` with
        `completed` (bool) for `status`; None when there are none."""
        attempts = self._attempts
        if not attempts:
            return None
        # One pass in C over the flattened tuples (twice as fast as a structured array here);
        # every field is exact as a float64 (integers far below 2**53).
        flat = np.fromiter(
            chain.from_iterable(attempts), dtype=np.float64, count=_NUM_FIELDS * len(attempts)
        ).reshape(-1, _NUM_FIELDS)
        attempts.clear()
        columns = {
            name: flat[:, i] if name in _FLOAT_FIELDS else flat[:, i].astype(np.int64)
            for i, name in enumerate(ATTEMPT_FIELDS[:-1])
        }
        columns["completed"] = flat[:, -1] == COMPLETED
        return columns

    def drain_busy(self, until: float | None = None) -> list[tuple[int, float, float]]:
        """(dp_rank, t_start, t_end) intervals with >= 1 sequence running, closed since the last
        call; with `until`, open intervals are cut there too (and go on from `until`)."""
        busy, self._busy = self._busy, []
        if until is not None:
            for e in self._engines.values():
                if e.busy_since is not None and e.busy_since < until:
                    busy.append((e.dp_rank, e.busy_since, until))
                    e.busy_since = until
        return busy

    def copy(self) -> RolloutGroup:
        """An independent copy; per-trajectory lists are shared until either side submits."""
        other = RolloutGroup.__new__(RolloutGroup)
        other.__dict__.update(self.__dict__)
        self._shared_lists = other._shared_lists = True
        other._front = deque(self._front)
        other._batch_ids = list(self._batch_ids)
        other._batch_left = list(self._batch_left)
        other._batch_slot = dict(self._batch_slot)
        other._done_batches = list(self._done_batches)
        other._attempts = list(self._attempts)
        other._busy = list(self._busy)
        other._engines = {rank: e.copy() for rank, e in self._engines.items()}
        other._events = [
            (t, rank, version, other._engines[rank])
            for t, rank, version, e in self._events
            if e.version == version
        ]
        heapify(other._events)
        other._wakes = []
        other._hungry = {rank: other._engines[rank] for rank in self._hungry}
        other._rebind()
        return other


def attempts_to_columns(attempts: list[Attempt]) -> dict[str, np.ndarray]:
    """Attempt tuples as one numpy array per field of `ATTEMPT_FIELDS`."""
    if not attempts:
        dtypes = (np.int64, np.int64, np.float64, np.float64, np.int64, np.int64, object)
        return {name: np.array([], dtype=d) for name, d in zip(ATTEMPT_FIELDS, dtypes, strict=True)}
    cols = list(zip(*attempts, strict=True))
    out = {name: np.array(col) for name, col in zip(ATTEMPT_FIELDS, cols, strict=True)}
    out["status"] = np.array(cols[-1], dtype=object)
    return out


__all__ = ["ATTEMPT_FIELDS", "Attempt", "RolloutGroup", "STOP_REASONS", "attempts_to_columns"]
