"""A token-by-token reference for `rlix.sim.engine.RolloutGroup`, to test its closed form.

It steps every iteration of every engine (one Python step each), computing each iteration's
time from the cost model's t(b, K) with K summed over the running sequences, and keeps each
sequence's generated count explicitly. It shares no code with the engine, only the rules:

- the router: share = min(max_batch, ceil(R / E)), R the trajectories not completed, E the
  engines (loading ones too); with `migrate_on_expand`, adding an engine marks every other
  engine to shed at its first boundary at or after the new engine's ready time;
- at a boundary: sequences with all their tokens complete; a marked engine sheds its latest
  admitted sequences while it runs more than the share (to the queue front, prefix kept);
  while fewer than the share (`balance`; else max_batch) run, free slots take the queue head
  while
  KV + b + need + 1 <= capacity - watermark (need = prompt + generated prefix, watermark =
  floor(capacity * kv_watermark)); while KV + b > capacity the
  latest admitted sequence goes back to the queue front with its prefix; if anything runs, the
  next iteration takes prefill compute of what was admitted + alpha(b) + beta * KV;
- an idle engine has a boundary when it becomes ready and whenever the queue gets work;
- boundaries run in (time, dp_rank) order; `advance(t)` runs those at or before t; removing an
  engine loses its iteration in flight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rlix.sim.costs import CostModel


@dataclass
class _Seq:
    idx: int
    generated: int
    prefix_at_admission: int
    t_start: float
    admitted: int


@dataclass
class _RefEngine:
    dp_rank: int
    t_ready: float
    next_t: float
    running: list[_Seq] = field(default_factory=list)
    in_flight: bool = False
    admissions: int = 0
    shed_from: float = math.inf
    closed: bool = False  # draining: admits nothing, takes no share of the queue


class ReferenceGroup:
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
        self.costs, self.tp, self.max_batch = costs, tp, max_batch
        self.balance, self.migrate_on_expand = balance, migrate_on_expand
        self.capacity = kv_capacity_tokens
        self.watermark = int(kv_capacity_tokens * kv_watermark)
        self.traj: list[tuple[int, int, int, int]] = []  # (traj_id, prompt, response, batch)
        self.queue: list[list[int]] = []  # [index, generated prefix], head first
        self.engines: dict[int, _RefEngine] = {}
        self.records: list[tuple[int, int, float, float, int, int, str]] = []
        self.now = 0.0

    def submit(self, traj_ids, prompt_tokens, response_tokens, batch_ids) -> None:  # type: ignore[no-untyped-def]
        for tid, p, r, bid in zip(traj_ids, prompt_tokens, response_tokens, batch_ids, strict=True):
            self.queue.append([len(self.traj), 0])
            self.traj.append((int(tid), int(p), int(r), int(bid)))
        self._queue_got_work(self.now)

    def add_engine(self, dp_rank: int, t_ready: float) -> None:
        if self.migrate_on_expand:
            for e in self.engines.values():
                # An idle engine had nothing to shed: an older mark is void.
                e.shed_from = min(e.shed_from, t_ready) if e.running else t_ready
        self.engines[dp_rank] = _RefEngine(dp_rank, t_ready, t_ready)

    def close_engine(self, dp_rank: int) -> None:
        self.engines[dp_rank].closed = True

    def remove_engine(self, dp_rank: int, t: float) -> int:
        e = self.engines.pop(dp_rank)
        self.now = t
        back = sorted(e.running, key=lambda s: s.admitted)
        for s in back:
            self.records.append(
                (
                    self.traj[s.idx][0],
                    dp_rank,
                    s.t_start,
                    t,
                    s.generated - s.prefix_at_admission,
                    s.prefix_at_admission,
                    "requeued",
                )
            )
        self.queue[:0] = [[s.idx, s.generated] for s in back]
        if back:
            self._queue_got_work(t)
        return len(back)

    def advance(self, t_limit: float) -> None:
        while self.engines:
            e = min(self.engines.values(), key=lambda x: (x.next_t, x.dp_rank))
            if e.next_t > t_limit or e.next_t == math.inf:
                break
            self._boundary(e, e.next_t)
        self.now = t_limit

    def _kv(self, e: _RefEngine) -> int:
        return sum(self.traj[s.idx][1] + s.generated for s in e.running)

    def _even_share(self) -> int:
        not_done = len(self.queue) + sum(len(e.running) for e in self.engines.values())
        sharing = max(1, sum(not e.closed for e in self.engines.values()))
        return min(self.max_batch, math.ceil(not_done / sharing))

    def _push_back_latest(self, e: _RefEngine, t: float) -> None:
        victim = max(e.running, key=lambda s: s.admitted)
        e.running.remove(victim)
        self.records.append(
            (
                self.traj[victim.idx][0],
                e.dp_rank,
                victim.t_start,
                t,
                victim.generated - victim.prefix_at_admission,
                victim.prefix_at_admission,
                "requeued",
            )
        )
        self.queue.insert(0, [victim.idx, victim.generated])

    def _boundary(self, e: _RefEngine, t: float) -> None:
        if e.in_flight:
            for s in e.running:
                s.generated += 1
        still = []
        for s in e.running:
            tid, _p, r, _b = self.traj[s.idx]
            if s.generated == r:
                self.records.append(
                    (
                        tid,
                        e.dp_rank,
                        s.t_start,
                        t,
                        r - s.prefix_at_admission,
                        s.prefix_at_admission,
                        "completed",
                    )
                )
            else:
                still.append(s)
        e.running = still
        pushed_back = False
        share = self._even_share()
        if e.shed_from <= t:
            e.shed_from = math.inf
            while len(e.running) > share:
                self._push_back_latest(e, t)
                pushed_back = True
        admitted_tokens = 0
        limit = share if self.balance else self.max_batch
        while not e.closed and len(e.running) < limit and self.queue:
            idx, prefix = self.queue[0]
            need = self.traj[idx][1] + prefix
            if self._kv(e) + len(e.running) + need + 1 > self.capacity - self.watermark:
                break
            self.queue.pop(0)
            e.running.append(_Seq(idx, prefix, prefix, t, e.admissions))
            e.admissions += 1
            admitted_tokens += need
        while self._kv(e) + len(e.running) > self.capacity:
            self._push_back_latest(e, t)
            pushed_back = True
        if e.running:
            duration = self.costs.decode_iteration_seconds(len(e.running), self._kv(e), self.tp)
            if admitted_tokens:
                duration += self.costs.prefill_compute_seconds(admitted_tokens, self.tp)
            e.next_t = t + duration
            e.in_flight = True
        else:
            e.next_t = math.inf
            e.in_flight = False
        if pushed_back:
            self._queue_got_work(t)

    def _queue_got_work(self, t: float) -> None:
        if not self.queue:
            return
        for e in self.engines.values():
            if not e.running and e.t_ready <= t and e.next_t > t:
                e.next_t = t
