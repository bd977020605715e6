"""One pipeline's rollout in the simulation: its engines, advanced speculatively, and its records.

The engines of a pipeline (`rlix.sim.engine.RolloutGroup`) advance in closed form, so the
simulator needs a SimPy event only when something outside them must happen: a progress report
to the core, a finished batch, or a change from outside (an expansion, a shrink, a new batch).
Between those, the process advances a *copy* of the group to the next such stop and sleeps
until then; if nothing interrupted it, the copy becomes the state, so the work is done once.
When something does interrupt (`sync`), the copy is thrown away and the real state is advanced
exactly to now before the change is applied, so results never depend on how far it looked ahead.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from rlix.sim.batches import Batch
from rlix.sim.engine import attempts_to_columns

if TYPE_CHECKING:
    from rlix.runs.host import Host
    from rlix.sim.engine import RolloutGroup
    from rlix.sim.simulate import Simulation

#: The longest look-ahead, in simulated seconds: a bound on the work an interruption can waste.
MAX_LOOKAHEAD_S = 600.0


class PipelineRollout:
    def __init__(
        self,
        sim: Simulation,
        pipeline_id: str,
        group: RolloutGroup,
        host: Host[Any],
        gpus_of_rank: dict[int, tuple[int, ...]],
        progress_every: float,
    ) -> None:
        self.sim = sim
        self.env: simpy.Environment = sim.env
        self.pipeline_id = pipeline_id
        self.group = group
        self.host = host
        self.gpus_of_rank = gpus_of_rank
        self.progress_every = progress_every
        self.alive = True
        self._epoch = 0
        self._wake = self.env.event()
        # Per trajectory (ids are 0, 1, 2, ... in submission order).
        self._adapter: list[str] = []
        self._step: list[int] = []
        self._prompt = np.zeros(0, dtype=np.int64)
        self._response = np.zeros(0, dtype=np.int64)
        self._num_preempted = np.zeros(0, dtype=np.int64)
        self._completed = np.zeros(0, dtype=bool)
        self._batch_keys: list[tuple[str, int]] = []
        self._batch_size: list[int] = []
        self._batch_rewards: dict[int, float] = {}
        self.remaining: Counter[str] = Counter()
        self._reported_total = 0
        self._report_every = 1
        self.rows: dict[str, list[Any]] = {}
        self.env.process(self._run())

    # --- changes from outside -------------------------------------------------------------

    def submit(self, adapter: str, step: int, batch: Batch) -> dict[str, int]:
        self.sync()
        n = len(batch.response_tokens)
        first = len(self._adapter)
        batch_id = len(self._batch_keys)
        self._batch_keys.append((adapter, step))
        self._batch_size.append(n)
        self._adapter.extend([adapter] * n)
        self._step.extend([step] * n)
        self._prompt = np.concatenate([self._prompt, batch.prompt_tokens])
        self._response = np.concatenate([self._response, batch.response_tokens])
        self._num_preempted = np.concatenate([self._num_preempted, np.zeros(n, dtype=np.int64)])
        self._completed = np.concatenate([self._completed, np.zeros(n, dtype=bool)])
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

    def add_engine(self, dp_rank: int) -> None:
        self.sync()
        self.group.add_engine(dp_rank, self.env.now)
        self._poke()

    def remove_engine(self, dp_rank: int) -> None:
        self.sync()
        if dp_rank in self.group.engines:
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
        for dp_rank, t0, t1 in self.group.drain_busy(self.env.now):
            self.sim.recorder.add_activity(
                self.pipeline_id,
                "actor_infer",
                dp_rank,
                self.gpus_of_rank[dp_rank],
                "busy",
                "rollout",
                t0,
                t1,
            )
        self.alive = False
        self._poke()
        open_ids = np.flatnonzero(~self._completed)
        now = self.env.now
        self._append_rows(
            open_ids,
            np.full(len(open_ids), -1),
            np.full(len(open_ids), now),
            np.full(len(open_ids), now),
            np.zeros(len(open_ids)),
            status,
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
            if not group.engines or group.num_remaining == 0:
                yield self._wake
                continue
            ahead = group.copy()
            total = sum(self.remaining.values())
            to_report = max(1, total - (self._reported_total - self._report_every))
            t_stop, reason = ahead.advance(env.now + MAX_LOOKAHEAD_S, to_report)
            epoch = self._epoch
            if reason == "idle":  # engines have nothing to do: nothing to adopt
                yield self._wake
                continue
            yield env.timeout(max(0.0, t_stop - env.now)) | self._wake
            if epoch != self._epoch or env.now < t_stop:
                continue  # something changed first: sync() has set the state to that moment
            self.group = ahead
            self._absorb()

    def _absorb(self) -> None:
        """Take what the group did (attempts, busy spans, finished batches) into the record,
        and tell the host about progress and finished batches."""
        group = self.group
        attempts = group.drain_attempts()
        if attempts:
            a = attempts_to_columns(attempts)
            ids = a["traj_id"].astype(np.int64)
            completed = a["status"] == "completed"
            self._append_rows(
                ids[~completed],
                np.asarray(a["dp_rank"])[~completed],
                np.asarray(a["t_start"])[~completed],
                np.asarray(a["t_end"])[~completed],
                a["recomputed_tokens"][~completed],
                "requeued",
            )
            np.add.at(self._num_preempted, ids[~completed], 1)
            done = ids[completed]
            self._append_rows(
                done,
                np.asarray(a["dp_rank"])[completed],
                np.asarray(a["t_start"])[completed],
                np.asarray(a["t_end"])[completed],
                a["recomputed_tokens"][completed],
                "completed",
            )
            self._completed[done] = True
            for adapter, count in Counter(self._adapter[i] for i in done.tolist()).items():
                self.remaining[adapter] -= count
        for dp_rank, t0, t1 in group.drain_busy():
            self.sim.recorder.add_activity(
                self.pipeline_id,
                "actor_infer",
                dp_rank,
                self.gpus_of_rank[dp_rank],
                "busy",
                "rollout",
                t0,
                t1,
            )
        finished = group.done_batches()
        total = sum(self.remaining.values())
        if finished or total <= self._reported_total - self._report_every:
            self._reported_total = total
            self.host.progress(dict(self.remaining))
        for batch_id in finished:
            adapter, step = self._batch_keys[batch_id]
            self.host.batch_done(adapter, step, {"num_trajectories": self._batch_size[batch_id]})

    def _append_rows(
        self,
        ids: np.ndarray,
        dp_rank: np.ndarray,
        t_start: np.ndarray,
        t_end: np.ndarray,
        recomputed: np.ndarray,
        status: str,
    ) -> None:
        if not len(ids):
            return
        versions = self.sim.versions_at(
            self.pipeline_id, [self._adapter[i] for i in ids.tolist()], t_start
        )
        rows = self.rows
        if not rows:
            rows.update(
                {
                    name: []
                    for name in (
                        "pipeline_id",
                        "adapter",
                        "trajectory_id",
                        "step_consumed",
                        "weight_version",
                        "prompt_tokens",
                        "response_tokens",
                        "t_start",
                        "t_end",
                        "preemptions",
                        "status",
                        "dp_rank",
                        "recomputed_tokens",
                    )
                }
            )
        n = len(ids)
        rows["pipeline_id"].extend([self.pipeline_id] * n)
        rows["adapter"].extend(self._adapter[i] for i in ids.tolist())
        rows["trajectory_id"].extend(ids.tolist())
        rows["step_consumed"].extend(self._step[i] for i in ids.tolist())
        rows["weight_version"].extend(versions)
        rows["prompt_tokens"].extend(self._prompt[ids].tolist())
        rows["response_tokens"].extend(self._response[ids].tolist())
        rows["t_start"].extend(np.asarray(t_start, dtype=float).tolist())
        rows["t_end"].extend(np.asarray(t_end, dtype=float).tolist())
        rows["preemptions"].extend(self._num_preempted[ids].tolist())
        rows["status"].extend([status] * n)
        rows["dp_rank"].extend(np.asarray(dp_rank, dtype=np.int64).tolist())
        rows["recomputed_tokens"].extend(np.asarray(recomputed, dtype=np.int64).tolist())
