"""The event loop of `RolloutGroup` (engine.py): the hot path and its rare branches.

`EventLoop._run` processes one boundary of one engine per turn in (time, dp_rank) order:
completions, a pending migration, admissions from the queue head up to the even share, KV
preemption, then the engine's next event (see engine.py for the rules).
"""

from __future__ import annotations

import math
from collections import deque
from heapq import heappop, heappush, heapreplace
from typing import Any

from rlix.sim.engine_state import (
    COMPLETED,
    IDX_BITS,
    IDX_MASK,
    REQUEUED,
    Engine,
    boundary_after,
    drop_dead,
    time_at,
)

_INF = math.inf
Attempt = tuple[int, int, float, float, int, int, str]


class EventLoop:
    """State and event processing shared by `RolloutGroup`; attributes are set there."""

    max_batch: int
    balance: bool
    kv_capacity_tokens: int
    admit_limit_tokens: int
    now: float
    _alpha: list[float]
    _beta: float
    _prefill_per_token_s: float
    _tid: list[int]
    _prompt: list[int]
    _resp: list[int]
    _batch: list[int]
    _front: deque[tuple[int, int]]
    _qhead: int
    _batch_ids: list[int]
    _batch_left: list[int]
    _batch_slot: dict[int, int]
    _done_batches: list[int]
    _attempts: list[Attempt]
    _busy: list[tuple[int, float, float]]
    _engines: dict[int, Engine]
    _events: list[tuple[float, int, int, Engine]]
    _wakes: list[tuple[float, int, int, Engine]]
    _hungry: dict[int, Engine]
    _num_open: int
    _hot: tuple[Any, ...]

    def _rebind(self) -> None:
        """What `_run` reads, in one tuple (one attribute load, not a dozen); rebuilt whenever
        one of these objects is replaced (submit's copy on write, copy)."""
        self._hot = (
            self._prompt,
            self._resp,
            self._tid,
            self._batch,
            self._batch_left,
            self._attempts.append,
            self._front,
            self._alpha,
            self._beta,
            self.kv_capacity_tokens,
            self.admit_limit_tokens,
            self.max_batch,
            self._prefill_per_token_s,
            self._events,
            self._wakes,
            self._hungry,
            self.balance,
        )

    def _run(self, t_limit: float, target: int) -> tuple[float, str]:
        """The event loop: one boundary of one engine per turn, in (time, dp_rank) order.
        At a boundary (time t, iteration counter n): completions, admissions from the queue
        head, KV preemption, then the engine's next event. This is the simulator's hot path,
        so it is one function over local variables; the rare paths are methods."""
        (
            prompt,
            resp,
            tid,
            batch,
            left,
            record,
            front,
            alpha,
            beta,
            capacity,
            admit_limit,
            max_batch,
            prefill_per_token_s,
            events,
            wakes,
            hungry,
            balance,
        ) = self._hot
        # Module globals as locals (a global load per use is measurable at ~10^7 events).
        pop, push, replace = heappop, heappush, heapreplace
        idx_bits, idx_mask, completed, inf = IDX_BITS, IDX_MASK, COMPLETED, _INF
        count = 0
        num_submitted = len(tid)
        # Trajectories open (queued or running) are `open0 - count` (the even share's R).
        open0 = self._num_open
        num_engines = len(self._engines)
        # Only the admissions below move the fresh-queue head: a local mirror of `_qhead`.
        qhead = self._qhead
        batch_done = False
        t = self.now
        while events:
            t, rank, version, e = events[0]
            if t > t_limit:
                self._num_open = open0 - count
                return t_limit, ""
            if e.version != version:
                pop(events)
                continue
            n = e.ev_n
            b = e.b
            kv = e.kv + b * (n - e.n0)
            heap = e.heap
            info = e.info
            dead = e.dead
            # Keys below `alive_from` finish at or before counter n.
            alive_from = (n + 1) << idx_bits
            while heap and heap[0] < alive_from:
                key = pop(heap)
                if dead and key in dead:
                    drop_dead(dead, key)
                    continue
                idx = key & idx_mask
                g0, t_start, _ = info.pop(idx)
                r = resp[idx]
                b -= 1
                kv -= prompt[idx] + r
                count += 1
                record((tid[idx], rank, t_start, t, r - g0, g0, completed))
                slot = batch[idx]
                left[slot] -= 1
                if not left[slot]:
                    self._batch_finished(slot)
                    batch_done = True
            extra_s = 0.0
            head_changed = False
            migrate_at = e.migrate_at
            if migrate_at <= t:
                e.migrate_at = migrate_at = inf
                self._num_open = open0 - count
                if b:
                    b, kv, head_changed = self._migrate_out(e, t, n, b, kv)
            if b < max_batch and (front or qhead < num_submitted):
                cap = max_batch
                if balance:
                    cap = -(-(open0 - count) // num_engines)
                    if cap > max_batch:
                        cap = max_batch
                tokens = 0
                while b < cap:
                    if front:
                        idx, g0 = front[0]
                        need = prompt[idx] + g0
                        if kv + b + need >= admit_limit:
                            break
                        front.popleft()
                    elif qhead < num_submitted:
                        idx = qhead
                        g0 = 0
                        need = prompt[idx]
                        if kv + b + need >= admit_limit:
                            break
                        qhead += 1
                    else:
                        break
                    key = (n + resp[idx] - g0) << idx_bits | idx
                    push(heap, key)
                    info[idx] = (g0, t, key)
                    kv += need
                    b += 1
                    tokens += need
                if tokens:
                    self._qhead = qhead
                    head_changed = True
                    extra_s = tokens * prefill_per_token_s
                    if e.busy_since is None:
                        e.busy_since = t
                elif b >= cap:
                    # Held at the even share with work queued: a rank woken to take the head
                    # may find the share shrunk since; wake the next one that can take it.
                    head_changed = True
            if kv + b > capacity:
                b, kv = self._preempt_for_kv(e, t, n, b, kv)
                head_changed = True
            e.n0 = n
            e.t0 = t
            e.kv = kv
            e.b = b
            e.extra_s = extra_s
            if b:
                if dead:
                    while heap[0] in dead:
                        drop_dead(dead, pop(heap))
                m = (heap[0] >> idx_bits) - n
                m_kv = (capacity - kv) // b
                if m_kv < m:
                    m = m_kv
                if migrate_at != inf:  # pending: stop at the boundary where it is due
                    m_migrate = boundary_after(e, migrate_at, alpha[b], beta)
                    if m_migrate < m:
                        m = m_migrate
                te = e.ev_t = t + extra_s + m * alpha[b] + beta * (m * kv + b * m * (m - 1) // 2)
                e.ev_n = n + m
                e.version = version = version + 1
                # The processed entry is still on top (wakes wait in `wakes`): replace it.
                replace(events, (te, rank, version, e))
            else:
                e.ev_t = inf
                pop(events)
                if e.busy_since is not None:
                    self._busy.append((rank, e.busy_since, t))
                    e.busy_since = None
            if head_changed:
                self._num_open = open0 - count
            if b < max_batch:
                if not e.hungry:
                    e.hungry = True
                    hungry[rank] = e
                if head_changed and len(hungry) > 1 and (front or qhead < num_submitted):
                    self._wake_hungry(t, rank)
            elif e.hungry:
                e.hungry = False
                del hungry[rank]
                if head_changed and hungry and (front or qhead < num_submitted):
                    self._wake_hungry(t, rank)
            elif head_changed and hungry and (front or qhead < num_submitted):
                self._wake_hungry(t, rank)
            if wakes:
                self._flush_wakes()
            if batch_done:
                self._num_open = open0 - count
                self.now = t
                return t, "batch_done"
            if count >= target > 0:
                self._num_open = open0 - count
                self.now = t
                return t, "completions"
        self._num_open = open0 - count
        return t, ""

    def _preempt_for_kv(self, e: Engine, t: float, n: int, b: int, kv: int) -> tuple[int, int]:
        """Preempt the most recently admitted sequences until the next iteration fits."""
        capacity = self.kv_capacity_tokens
        while kv + b > capacity:
            kv -= self._requeue_latest(e, t, n)
            b -= 1
        self._drop_dead_top(e)
        return b, kv

    def _migrate_out(self, e: Engine, t: float, n: int, b: int, kv: int) -> tuple[int, int, bool]:
        """A rank joined: send what runs above the even share back to the queue front, latest
        admitted first, as a preemption does. Returns (b, kv, whether any left)."""
        cap = min(self.max_batch, -(-self._num_open // len(self._engines)))
        if b <= cap:
            return b, kv, False
        while b > cap:
            kv -= self._requeue_latest(e, t, n)
            b -= 1
        self._drop_dead_top(e)
        return b, kv, True

    def _requeue_latest(self, e: Engine, t: float, n: int) -> int:
        """Stop the most recently admitted sequence (the last in `info`, which keeps admission
        order) at boundary n and put it at the queue front with its prefix; returns the KV
        tokens it held. Its heap key stays for the completion loop to drop (`dead`)."""
        idx = next(reversed(e.info))
        g0, t_start, key = e.info.pop(idx)
        e.dead[key] = e.dead.get(key, 0) + 1
        generated = n - ((key >> IDX_BITS) - self._resp[idx] + g0)
        self._attempts.append((self._tid[idx], e.dp_rank, t_start, t, generated, g0, REQUEUED))
        self._front.appendleft((idx, g0 + generated))
        return self._prompt[idx] + g0 + generated

    def _drop_dead_top(self, e: Engine) -> None:
        heap, dead = e.heap, e.dead
        while heap and heap[0] in dead:
            drop_dead(dead, heappop(heap))

    def _mark_migration(self, t_ready: float) -> None:
        """A rank joins at `t_ready`: every engine sheds above the even share at its first
        boundary at or after then; a busy one gets an event there unless one comes first. An
        idle engine's older mark is dropped: it had nothing to shed, and when it was due is
        not tracked (idle engines have no boundaries here)."""
        beta = self._beta
        for e in self._engines.values():
            if not e.b or t_ready < e.migrate_at:
                e.migrate_at = t_ready
            if e.b:
                alpha = self._alpha[e.b]
                m = boundary_after(e, t_ready, alpha, beta)
                if e.n0 + m < e.ev_n:
                    self._schedule(e, time_at(e, m, alpha, beta), e.n0 + m)
        self._flush_wakes()

    def _wake_hungry(self, t: float, skip_rank: int) -> None:
        """The queue head changed at t. Of the engines with a free slot, the one that can take
        the head first gets an event at that boundary (the new event waits in `_wakes` until
        `_flush_wakes`). Waking one is enough: when it takes the head, the head changes and
        this runs again; the others could not take this head before it anyway, since an
        engine's KV only grows until its own next completion, which is an event anyway. Under
        the even share only engines below it now are candidates (the share only shrinks until
        the next submit or removal, which wake again)."""
        front = self._front
        if not self._hungry:
            return
        if front:
            idx, g0 = front[0]
        elif self._qhead < len(self._tid):
            idx, g0 = self._qhead, 0
        else:
            return
        need = self._prompt[idx] + g0
        admit_limit, beta = self.admit_limit_tokens, self._beta
        cap = self.max_batch
        if self.balance:
            cap = min(cap, -(-self._num_open // len(self._engines)))
        best: tuple[float, int, int, Engine] | None = None
        for rank, e in self._hungry.items():
            if rank == skip_rank:
                continue
            b = e.b
            if b >= cap:
                continue
            if not b:
                candidate = (t, rank, e.n0, e)
            else:
                if e.kv + 2 * b + need >= admit_limit:
                    continue
                alpha = self._alpha[b]
                m = boundary_after(e, t, alpha, beta)
                if e.kv + b * (m + 1) + need >= admit_limit:
                    continue
                candidate = (time_at(e, m, alpha, beta), rank, e.n0 + m, e)
            if best is None or candidate[:2] < best[:2]:
                best = candidate
        if best is not None:
            t_wake, _, n_wake, e = best
            # Unless its own next event comes first (busy: by counter; idle: by time).
            if (n_wake < e.ev_n) if e.b else (t_wake < e.ev_t):
                self._schedule(e, t_wake, n_wake)

    def _schedule(self, e: Engine, t: float, n: int) -> None:
        e.version += 1
        e.ev_t, e.ev_n = t, n
        self._wakes.append((t, e.dp_rank, e.version, e))

    def _flush_wakes(self) -> None:
        for entry in self._wakes:
            heappush(self._events, entry)
        self._wakes.clear()

    def _complete(self, idx: int, rank: int, t_start: float, t_end: float, g0: int) -> None:
        self._num_open -= 1
        self._attempts.append(
            (self._tid[idx], rank, t_start, t_end, self._resp[idx] - g0, g0, COMPLETED)
        )
        slot = self._batch[idx]
        self._batch_left[slot] -= 1
        if not self._batch_left[slot]:
            self._batch_finished(slot)

    def _batch_finished(self, slot: int) -> None:
        batch_id = self._batch_ids[slot]
        if self._batch_slot.get(batch_id) == slot:
            del self._batch_slot[batch_id]
        self._done_batches.append(batch_id)
