"""One pipeline's rollout in the simulation: its engines, advanced speculatively, and its records.

The engines of a pipeline (`rlix.sim.engine.RolloutGroup`) advance in closed form, so the
simulator needs a SimPy event only when something outside them must happen: a progress report
to the core, a finished batch, or a change from outside (an expansion, a shrink, a new batch).
Between those, the process advances a *copy* of the group to the next such stop and sleeps
until then; if nothing interrupted it, the copy becomes the state, so the work is done once.
The group the copy replaced (or a copy thrown away) is kept as the spare whose memory the next
copy is made in.
When something does interrupt (`sync`), the copy is thrown away and the real state is advanced
exactly to now before the change is applied, so results never depend on how far it looked ahead.

Records stay columnar: per-trajectory facts in growing numpy buffers, attempt rows in the
compiled `AttemptRows` (filled from the group's attempts in C at each stop) until the run's
table is built (`take_rows`), so no Python work per trajectory or per attempt.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import simpy

from rlix.policy.specs import ROLLOUT_CLUSTER
from rlix.sim._engine import AttemptRows
from rlix.sim.batches import Batch
from rlix.traces.schema import ROLLOUT_STATUSES

if TYPE_CHECKING:
    from rlix.runs.host import Host
    from rlix.sim.engine import RolloutGroup
    from rlix.sim.simulation import Simulation

#: The longest look-ahead, in simulated seconds: a bound on the work an interruption can waste.
#: On cluster-1024 a pipeline's ranks change every few simulated seconds, so most look-aheads
#: are cut short: 60 s spent 10% less CPU than 600 s there (5-60 s all within noise).
MAX_LOOKAHEAD_S = 60.0


class _Buffer:
    """A growing 1-D numpy array (amortised growth by a quarter, not a copy per append: a
    simulated day holds ~10^8 entries, and doubling would leave up to half of them unused)."""

    def __init__(self, dtype: Any) -> None:
        self.data = np.zeros(1024, dtype=dtype)
        self.size = 0

    def extend(self, values: Any) -> None:
        n = len(values)
        if self.size + n > len(self.data):
            grown = np.zeros(max(len(self.data) * 5 // 4, self.size + n), dtype=self.data.dtype)
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size : self.size + n] = values
        self.size += n

    @property
    def view(self) -> np.ndarray:
        return self.data[: self.size]


#: The fewest completed trajectories `_drop_completed` cuts at once (a copy of the open ones
#: is paid for each cut).
MIN_DROP = 1 << 16

_COMPLETED = ROLLOUT_STATUSES.index("completed")
_REQUEUED = ROLLOUT_STATUSES.index("requeued")


class PipelineRollout:
    def __init__(
        self,
        sim: Simulation,
        pipeline_id: str,
        group: RolloutGroup,
        host: Host[Any],
        progress_every: float,
    ) -> None:
        self.sim = sim
        self.env: simpy.Environment = sim.env
        self.pipeline_id = pipeline_id
        self.group = group
        self.host = host
        self.progress_every = progress_every
        self.alive = True
        self._epoch = 0
        # A group nothing uses any more, whose memory the next look-ahead copy reuses.
        self._spare: RolloutGroup | None = None
        self._wake = self.env.event()
        # Per trajectory (ids are 0, 1, 2, ... in submission order); adapters as codes.
        self._adapters: list[str] = []
        self._adapter_code: dict[str, int] = {}
        # 32-bit (16 for adapter codes): a simulated day of a large cluster has ~10^8 rows.
        self._adapter = _Buffer(np.int16)
        self._step = _Buffer(np.int32)
        self._prompt = _Buffer(np.int32)
        self._response = _Buffer(np.int32)
        self._num_preempted = _Buffer(np.int32)
        self._completed = _Buffer(bool)
        self._batch_keys: list[tuple[str, int]] = []
        self._batch_size: list[int] = []
        self.remaining: Counter[str] = Counter()
        self._reported_total = 0
        self._report_every = 1
        self.num_completed = 0  # trajectories completed so far
        # Attempt rows, a growing array per column (status as codes of ROLLOUT_STATUSES): one
        # array, not a chunk per absorb, so that the end of a 10^8-row run can hand whole
        # arrays back to the OS as it joins them into the table (freed small chunks stay in
        # the process's heap, and the table came on top of them).
        self._rows = AttemptRows()
        self._rows.keep = sim.keep_rollouts
        # Without attempt rows the per-trajectory buffers hold only trajectories from the
        # first open one on (`_drop_completed`): index = trajectory id - `_base`.
        self._base = 0
        self._submitted_tokens = 0
        # Ranks draining (closed to admissions), by dp_rank: the event that fires when they run
        # nothing any more (or are gone).
        self._draining: dict[int, simpy.Event] = {}
        self.env.process(self._run())

    # --- changes from outside -------------------------------------------------------------

    def submit(self, adapter: str, step: int, batch: Batch) -> dict[str, int]:
        self.sync()
        if not self._rows.keep:
            self._drop_completed()
        n = len(batch.response_tokens)
        first = self._base + self._adapter.size
        self._submitted_tokens += int(batch.response_tokens.sum())
        batch_id = len(self._batch_keys)
        self._batch_keys.append((adapter, step))
        self._batch_size.append(n)
        code = self._adapter_code.get(adapter)
        if code is None:
            code = self._adapter_code[adapter] = len(self._adapters)
            self._adapters.append(adapter)
        self._adapter.extend(np.full(n, code))
        self._step.extend(np.full(n, step))
        self._prompt.extend(batch.prompt_tokens)
        self._response.extend(batch.response_tokens)
        self._num_preempted.extend(np.zeros(n, dtype=np.int32))
        self._completed.extend(np.zeros(n, dtype=bool))
        self.group.submit(
            np.arange(first, first + n),
            batch.prompt_tokens,
            batch.response_tokens,
            np.full(n, batch_id),
        )
        self.remaining[adapter] += n
        total = sum(self.remaining.values())
        self._reported_total = total
        self._report_every = max(1, math.ceil(self.progress_every * total))
        self._poke()
        return dict(self.remaining)

    def add_engine(self, dp_rank: int, t_ready: float | None = None) -> None:
        """Start `dp_rank`'s engine, taking work from `t_ready` (default now). Added when its
        weight load starts, a loading rank counts in the router's even share at once."""
        self.sync()
        self.group.add_engine(dp_rank, self.env.now if t_ready is None else t_ready)
        self._poke()

    def drain(self, dp_rank: int) -> simpy.Event:
        """Close `dp_rank`'s engine to admissions (it runs what it holds); the event fires when
        it runs nothing any more, at once if it runs nothing now or has no engine."""
        self.sync()
        done = self.env.event()
        group = self.group
        if not group.has_engine(dp_rank) or not group.engine(dp_rank).b:
            return done.succeed()
        group.close_engine(dp_rank)
        self._draining[dp_rank] = done
        self._poke()  # the look-ahead must stop where the engine empties
        return done

    def remove_engine(self, dp_rank: int) -> None:
        self.sync()
        if self.group.has_engine(dp_rank):
            self.group.remove_engine(dp_rank, self.env.now)
            self._absorb()
        self._poke()

    def stop(self, status: str) -> None:
        """The pipeline is gone (`aborted`) or the run ends (`in_flight`): every trajectory not
        completed gets a final row with that status."""
        if not self.alive:
            return
        self.sync()
        for dp_rank in list(self.group.engines):
            self.group.remove_engine(dp_rank, self.env.now)
        self._absorb()
        self._record_busy(self.group.drain_busy(self.env.now))
        self.alive = False
        self._poke()
        open_ids = np.flatnonzero(~self._completed.view)
        if not self._rows.keep:
            self._count_rows(open_ids)
            return
        now = self.env.now
        self._append_rows(
            open_ids,
            np.full(len(open_ids), -1),
            np.full(len(open_ids), now),
            np.full(len(open_ids), now),
            np.zeros(len(open_ids)),
            np.full(len(open_ids), ROLLOUT_STATUSES.index(status), dtype=np.int8),
            self._num_preempted.data[open_ids],
        )

    # --- advancing ------------------------------------------------------------------------

    def sync(self) -> None:
        """Throw the look-ahead away and bring the real state exactly to now."""
        self._epoch += 1
        now = self.env.now
        while True:  # the group stops at each finished batch; go on to now
            t_reached, _reason = self.group.advance(now)
            self._absorb()
            if t_reached >= now:
                return

    def _poke(self) -> None:
        if not self._wake.triggered:
            self._wake.succeed()

    def _run(self) -> Any:
        env = self.env
        while self.alive:
            if self._wake.triggered:
                self._wake = env.event()
            group = self.group
            if not group.num_engines or group.num_remaining == 0:
                yield self._wake
                continue
            ahead = group.copy(self._spare)
            self._spare = None
            total = sum(self.remaining.values())
            to_report = max(1, total - (self._reported_total - self._report_every))
            t_stop, reason = ahead.advance(env.now + MAX_LOOKAHEAD_S, to_report)
            epoch = self._epoch
            if reason == "idle":  # engines have nothing to do: nothing to adopt
                self._spare = ahead
                yield self._wake
                continue
            yield env.timeout(max(0.0, t_stop - env.now)) | self._wake
            if epoch != self._epoch or env.now < t_stop:
                self._spare = ahead
                continue  # something changed first: sync() has set the state to that moment
            self._spare = group  # the state the look-ahead replaced: memory for the next copy
            self.group = ahead
            self._absorb()

    def _absorb(self) -> None:
        """Take what the group did (attempts, busy spans, finished batches) into the record,
        and tell the host about progress and finished batches."""
        group = self.group
        done = self._rows.absorb(
            group,
            self._num_preempted.data,
            self._completed.data.view(np.uint8),
            self._adapter.data,
            self._publish_times(),
            _COMPLETED,
            _REQUEUED,
            self._base,
        )
        for code, count in enumerate(done):
            if count:
                self.num_completed += count
                self.remaining[self._adapters[code]] -= count
        self._record_busy(group.drain_busy())
        finished = group.done_batches()
        total = sum(self.remaining.values())
        if finished or total <= self._reported_total - self._report_every:
            self._reported_total = total
            self.host.progress(dict(self.remaining))
        if total:
            queued = group.num_queued
            if not (queued and self.host.ranks_queued):  # nothing new to say while work queues
                self.host.ranks_progress(group.running_by_rank(), queued)
        for batch_id in finished:
            adapter, step = self._batch_keys[batch_id]
            self.host.batch_done(adapter, step, {"num_trajectories": self._batch_size[batch_id]})
        if self._draining:
            for dp_rank, drained in list(self._draining.items()):
                if not group.has_engine(dp_rank) or not group.engine(dp_rank).b:
                    del self._draining[dp_rank]
                    drained.succeed()

    def _record_busy(self, spans: Iterable[tuple[int, float, float]]) -> None:
        """Record the engines' busy spans, (dp rank, start, end), as the rank's rollout activity."""
        bundle = self.host.spec.rollout.bundle
        for dp_rank, t0, t1 in spans:
            self.sim.recorder.add_activity(
                self.pipeline_id, ROLLOUT_CLUSTER, dp_rank, bundle(dp_rank), "busy", "rollout", t0, t1
            )

    def _drop_completed(self) -> None:
        """Cut the per-trajectory buffers to start at the first open trajectory, once at least
        half of them (and MIN_DROP) lie before it: nothing reads a completed trajectory's entries
        when no attempt rows are kept, and a week of a large cluster has ~10^9 trajectories."""
        done = self._completed.view
        first = len(done) if done.all() else int(np.argmin(done))
        if first < max(MIN_DROP, len(done) // 2):
            return
        for buffer in self._buffers():
            buffer.data[: buffer.size - first] = buffer.data[first : buffer.size]
            buffer.size -= first
        self._base += first

    def _buffers(self) -> tuple[_Buffer, ...]:
        return (self._adapter, self._step, self._prompt, self._response, self._num_preempted, self._completed)

    def _count_rows(self, open_ids: np.ndarray) -> None:
        """The recorder's counts of this pipeline's attempts (no rows kept): completed
        trajectories, their response tokens (every submitted token but the open ones'),
        re-queued attempts and recomputed tokens (counted as the rows went by)."""
        open_tokens = int(self._response.data[open_ids].sum(dtype=np.int64))
        self.sim.recorder.add_rollout_counts(self.pipeline_id, (
            self.num_completed, self._submitted_tokens - open_tokens,
            self._rows.num_requeued, self._rows.recomputed_tokens,
        ))

    def _append_rows(
        self,
        ids: np.ndarray,
        dp_rank: np.ndarray,
        t_start: np.ndarray,
        t_end: np.ndarray,
        recomputed: np.ndarray,
        status: np.ndarray,
        preemptions: np.ndarray,
    ) -> None:
        """Rows for these attempts; what depends on the moment (preemptions so far, the weight
        version at t_start) is fixed now, the rest when the table is built."""
        if not len(ids):
            return
        self._rows.append(
            self._adapter.data,
            self._publish_times(),
            trajectory_id=ids,
            dp_rank=dp_rank,
            t_start=t_start,
            t_end=t_end,
            recomputed_tokens=recomputed,
            preemptions=preemptions,
            status=status,
        )

    def _publish_times(self) -> list[np.ndarray | None]:
        """Each adapter's weight publish times so far, by adapter code."""
        return [self.sim.publish_times.get((self.pipeline_id, a)) for a in self._adapters]

    def take_rows(self) -> dict[str, Any] | None:
        """The attempt rows of the run, one array per rollout column of the recorder (numpy,
        text as pandas Categoricals); None when there are none. Only once the pipeline has
        stopped: its per-trajectory state goes with them (the rows are its last use)."""
        if self.alive:
            raise RuntimeError(f"take_rows: pipeline {self.pipeline_id!r} has not stopped")
        if not self._rows.size:
            return None
        # The arrays themselves (they own their memory): they go when the caller has joined them.
        rows: dict[str, Any] = self._rows.take_columns()
        self._rows = AttemptRows()
        ids = rows["trajectory_id"]
        rows.update(
            pipeline_id=pd.Categorical.from_codes(np.zeros(len(ids), np.int8), [self.pipeline_id]),
            adapter=pd.Categorical.from_codes(self._adapter.data[ids], self._adapters),
            step_consumed=self._step.data[ids],
            prompt_tokens=self._prompt.data[ids],
            response_tokens=self._response.data[ids],
            status=pd.Categorical.from_codes(rows["status"], ROLLOUT_STATUSES),
        )
        for buffer in (
            self._adapter,
            self._step,
            self._prompt,
            self._response,
            self._num_preempted,
        ):
            buffer.data = buffer.data[:0].copy()
            buffer.size = 0
        return rows
