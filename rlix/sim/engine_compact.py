"""Keeping a `RolloutGroup`'s per-trajectory lists as short as its open trajectories.

A group indexes its trajectories by submission order (internal index = position in `_tid`,
`_prompt`, `_resp`, `_batch`). A pipeline submits a batch per step for a whole run, so without
care these lists grow by the run's every trajectory (a simulated day of a large cluster is
~10^8). Before a submit, when every index below some `start` is done with (neither queued nor
running, nor a stale heap key), and that is at least half the lists, they are cut to `[start:]` and every index held
elsewhere (queue front, fresh-queue head, engines' heap keys, running info, dead keys) moves
down by `start`. Keys are `finish << 32 | idx` with idx >= start, so `key - start` only changes
the low bits: heap order, and every comparison the event loop makes, are unchanged.
"""

from __future__ import annotations

from collections import deque

from rlix.sim.engine_state import IDX_MASK, Engine

#: Lists shorter than this are never cut (the cut costs a pass over what runs and is queued).
MIN_COMPACT = 1 << 14


class Compaction:
    """Mixin of `RolloutGroup` (attributes are set there)."""

    _tid: list[int]
    _prompt: list[int]
    _resp: list[int]
    _batch: list[int]
    _shared_lists: bool
    _front: deque[tuple[int, int]]
    _qhead: int
    _engines: dict[int, Engine]

    def _own_lists(self) -> None:
        """Before the lists change: cut them if worth it, else copy them if a copy shares them."""
        if len(self._tid) >= MIN_COMPACT and 2 * self._qhead >= len(self._tid):
            start = self._first_in_use()
            if 2 * start >= len(self._tid):
                self._compact(start)
                return
        if self._shared_lists:
            self._tid, self._prompt = list(self._tid), list(self._prompt)
            self._resp, self._batch = list(self._resp), list(self._batch)
            self._shared_lists = False

    def _first_in_use(self) -> int:
        start = self._qhead
        for idx, _ in self._front:
            start = min(start, idx)
        for e in self._engines.values():
            if e.info:
                start = min(start, min(e.info))
            for key in e.dead:  # stale heap keys too: shifting them must not borrow
                start = min(start, key & IDX_MASK)
        return start

    def _compact(self, start: int) -> None:
        # New lists (slices): a copy sharing the old ones keeps them as they were.
        self._tid, self._prompt = self._tid[start:], self._prompt[start:]
        self._resp, self._batch = self._resp[start:], self._batch[start:]
        self._shared_lists = False
        self._qhead -= start
        self._front = deque((idx - start, g0) for idx, g0 in self._front)
        for e in self._engines.values():
            # Engines are the group's own (a copy copies them), so they change in place.
            e.heap[:] = [key - start for key in e.heap]
            e.info = {
                idx - start: (g0, t_start, key - start)
                for idx, (g0, t_start, key) in e.info.items()
            }
            if e.dead:
                e.dead = {key - start: count for key, count in e.dead.items()}
