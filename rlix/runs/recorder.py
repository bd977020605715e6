"""The record of a run, the same for both drivers: every event and decision, and the tables.

The loop feeds the recorder everything that passes between a driver and the core; holdings
(`allocations`) are derived here from those events and decisions, so neither driver writes
them its own way. Drivers add what only they can see: trajectory attempts (`rollouts`),
busy and loading spans of held GPUs (`activity`); the hosts add `steps` and request `waits`.

Tables (one row per ...):
- allocations: GPU per holding interval: pipeline_id, cluster, priority, dp_rank, gpu,
  t_start, t_end (dp_rank -1 for non-rollout clusters).
- activity: GPU per span in which a holder works (busy) or moves weights (loading):
  pipeline_id, cluster, dp_rank, gpu, kind, stage, t_start, t_end.
- steps: adapter step: pipeline_id, adapter, step, t_start, t_end, <stage>_s columns.
- rollouts: trajectory attempt (the columns of DESIGN.md).
- waits: non-rollout request: pipeline_id, cluster, priority, t_request, t_grant.

Given a sink (`rlix.runs.stream.RunSink`), the recorder streams the event log, allocations and
activity to the run folder as they come instead of holding them (`event_lines`,
`allocations` and `activity` stay empty), and a driver that keeps no rollouts table reports
running counts (`add_rollout_counts`) for the summary.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rlix.policy import decisions as dec
from rlix.policy import events as ev
from rlix.policy.config import PolicyConfig
from rlix.policy.specs import ROLLOUT_CLUSTER, Topology
from rlix.runs import codec
from rlix.runs.eventlog import SEGMENT

ALLOCATION_COLUMNS = ("pipeline_id", "cluster", "priority", "dp_rank", "gpu", "t_start", "t_end")
ACTIVITY_COLUMNS = ("pipeline_id", "cluster", "dp_rank", "gpu", "kind", "stage", "t_start", "t_end")
WAIT_COLUMNS = ("pipeline_id", "cluster", "priority", "t_request", "t_grant")
ROLLOUT_COLUMNS = (
    "pipeline_id", "adapter", "trajectory_id", "step_consumed", "weight_version", "prompt_tokens",
    "response_tokens", "t_start", "t_end", "preemptions", "status", "dp_rank", "recomputed_tokens",
)

if TYPE_CHECKING:
    from rlix.runs.stream import RunSink

Key = tuple[str, str, int]  # pipeline, cluster, dp_rank


class Recorder:
    def __init__(self, topology: Topology, policy: str, config: PolicyConfig,
                 sink: RunSink | None = None) -> None:
        self.topology = topology
        self.policy = policy
        self.sink = sink
        self.event_lines: list[str] = []
        self._line(json.dumps(codec.header(topology, policy, config)))
        #: Per pipeline, when its attempts are counted instead of kept (rlix.runs.totals
        #: TRAJECTORY_COLUMNS).
        self.rollout_counts: dict[str, list[int]] = {}
        self.allocations: list[tuple[Any, ...]] = []
        #: (pipeline, seconds) of each prefetch of weights (`add_prefetch`).
        self.prefetches: list[tuple[str, float]] = []
        self.activity: list[tuple[Any, ...]] = []
        self.waits: list[tuple[Any, ...]] = []
        self.steps: list[dict[str, Any]] = []
        #: Rollout attempts, column by column (drivers append many at a time).
        self.rollouts: dict[str, list[Any]] = {name: [] for name in ROLLOUT_COLUMNS}
        #: Open holdings: (pipeline, cluster, dp_rank) -> (priority, gpus, t_start).
        self._open: dict[Key, tuple[int, tuple[int, ...], float]] = {}
        #: Activity begun and not ended yet, by token (`open_activity`): a run cut while it
        #: goes on still shows it, up to the cut.
        #: token -> (pipeline_id, cluster, dp_rank, gpus, kind, stage, t_start)
        self._open_activity: dict[int, tuple[str, str, int, tuple[int, ...], str, str, float]] = {}
        self._activity_tokens = itertools.count()
        self.end_s = 0.0
        self.finished = False

    # --- the loop's side ------------------------------------------------------------------

    def on_event(self, event: ev.Event, decisions: Sequence[dec.Decision]) -> None:
        encode = codec.encode
        self._line(json.dumps(
            {"event": encode(event), "decisions": [encode(d) for d in decisions]}, separators=(",", ":")
        ))
        now = event.now
        if isinstance(event, ev.ClusterReleased):
            self._close((event.pipeline_id, event.cluster, -1), now)
        elif isinstance(event, ev.ClusterReleasedAndRequested):
            self._close((event.pipeline_id, event.released, -1), now)
        elif isinstance(event, ev.PipelineRemoved):
            for key in [k for k in self._open if k[0] == event.pipeline_id]:
                self._close(key, now)

    def _line(self, line: str) -> None:
        if self.sink is not None:
            self.sink.event_line(line)
        else:
            self.event_lines.append(line)

    def on_carry_out(self, decision: dec.Grant | dec.Expand | dec.Shrink, now: float) -> None:
        if isinstance(decision, dec.Grant):
            key = (decision.pipeline_id, decision.cluster, -1)
            self._open[key] = (decision.priority, decision.gpus, now)
        elif isinstance(decision, dec.Expand):
            key = (decision.pipeline_id, ROLLOUT_CLUSTER, decision.dp_rank)
            self._open[key] = (6, decision.gpus, now)

    def on_report(self, decision: dec.Decision, applied: bool, now: float) -> None:
        if isinstance(decision, dec.Shrink) and applied:
            self._close((decision.pipeline_id, ROLLOUT_CLUSTER, decision.dp_rank), now)
        elif isinstance(decision, dec.Grant) and not applied:
            self._open.pop((decision.pipeline_id, decision.cluster, -1), None)
        elif isinstance(decision, dec.Expand) and not applied:
            self._open.pop((decision.pipeline_id, ROLLOUT_CLUSTER, decision.dp_rank), None)

    def on_revoke(self, decision: dec.Revoke, now: float) -> None:
        self._close((decision.pipeline_id, decision.cluster, decision.dp_rank), now)

    def _close(self, key: Key, now: float) -> None:
        held = self._open.pop(key, None)
        if held is None:
            return
        priority, gpus, t_start = held
        pipeline_id, cluster, dp_rank = key
        add = self.allocations.append if self.sink is None else self.sink.allocation
        for gpu in gpus:
            add((pipeline_id, cluster, priority, dp_rank, gpu, t_start, now))

    # --- the drivers' and hosts' side -----------------------------------------------------

    def add_activity(self, pipeline_id: str, cluster: str, dp_rank: int, gpus: Iterable[int],
                     kind: str, stage: str, t_start: float, t_end: float) -> None:
        if t_end <= t_start:
            return
        add = self.activity.append if self.sink is None else self.sink.activity
        for gpu in gpus:
            add((pipeline_id, cluster, dp_rank, gpu, kind, stage, t_start, t_end))

    def open_activity(self, pipeline_id: str, cluster: str, dp_rank: int, gpus: Iterable[int],
                      kind: str, stage: str, t_start: float) -> int:
        """A span that has begun: its token ends it (`close_activity`), or `finish` at the cut."""
        token = next(self._activity_tokens)
        self._open_activity[token] = (pipeline_id, cluster, dp_rank, tuple(gpus), kind, stage, t_start)
        return token

    def close_activity(self, token: int, t_end: float | None) -> None:
        """End the span `token` at `t_end` (None: it is dropped, as if it never began)."""
        span = self._open_activity.pop(token, None)
        if span is not None and t_end is not None:
            self.add_activity(*span, t_end)

    def add_prefetch(self, pipeline_id: str, seconds: float) -> None:
        """A pipeline read weights into host memory for `seconds`, holding no GPU (summed per
        pipeline into the summary's `prefetch_s`)."""
        self.prefetches.append((pipeline_id, seconds))

    @property
    def prefetch_s(self) -> dict[str, float]:
        """Per pipeline, the seconds its prefetches took."""
        out: dict[str, float] = {}
        for pipeline_id, seconds in self.prefetches:
            out[pipeline_id] = out.get(pipeline_id, 0.0) + seconds
        return out

    def add_wait(self, pipeline_id: str, cluster: str, priority: int, t_request: float, t_grant: float) -> None:
        self.waits.append((pipeline_id, cluster, priority, t_request, t_grant))

    def add_step(self, row: dict[str, Any]) -> None:
        self.steps.append(row)

    def add_rollouts(self, columns: Mapping[str, Sequence[Any]]) -> None:
        """Append attempts given column by column (every ROLLOUT_COLUMNS name, equal lengths)."""
        lengths = {len(columns[name]) for name in ROLLOUT_COLUMNS}
        if len(lengths) != 1:
            raise ValueError(f"rollout columns of unequal lengths {sorted(lengths)}")
        for name in ROLLOUT_COLUMNS:
            self.rollouts[name].extend(columns[name])

    def add_rollout_counts(self, pipeline_id: str, counts: Sequence[int]) -> None:
        """A pipeline's attempts counted, not kept: completed trajectories, their response
        tokens, re-queued attempts, recomputed tokens (added to what it had)."""
        total = self.rollout_counts.setdefault(pipeline_id, [0, 0, 0, 0])
        for i, count in enumerate(counts):
            total[i] += int(count)

    # --- a copy kept elsewhere ------------------------------------------------------------
    # The executor's record lives in the orchestrator actor; the driver keeps a copy, pulled a
    # piece at a time, so that if the orchestrator dies the record so far is not lost with it.

    def cursor(self) -> tuple[int, ...]:
        """How much of each part this recorder holds (what `since` of another takes from)."""
        return (len(self.event_lines), len(self.allocations), len(self.activity), len(self.waits),
                len(self.steps), len(self.rollouts[ROLLOUT_COLUMNS[0]]), len(self.prefetches))

    def since(self, cursor: Sequence[int]) -> dict[str, Any]:
        """What this recorder holds beyond `cursor`, plus its open holdings (a copy's `extend`)."""
        events, allocations, activity, waits, steps, rollouts, prefetches = cursor
        return {
            "event_lines": self.event_lines[events:], "allocations": self.allocations[allocations:],
            "activity": self.activity[activity:], "waits": self.waits[waits:], "steps": self.steps[steps:],
            "rollouts": {name: self.rollouts[name][rollouts:] for name in ROLLOUT_COLUMNS},
            "prefetches": self.prefetches[prefetches:], "open": dict(self._open),
            "open_activity": list(self._open_activity.values()),
        }

    def extend(self, piece: dict[str, Any]) -> None:
        """Add a piece of another recorder's `since(self.cursor())`."""
        self.event_lines.extend(piece["event_lines"])
        self.allocations.extend(piece["allocations"])
        self.activity.extend(piece["activity"])
        self.waits.extend(piece["waits"])
        self.steps.extend(piece["steps"])
        self.add_rollouts(piece["rollouts"])
        self.prefetches.extend(piece["prefetches"])
        self._open = dict(piece["open"])
        # The copy's own tokens: it only ends them, at its finish (a journal from before has none).
        self._open_activity = dict(enumerate(piece.get("open_activity", [])))

    def _holding_ends(self) -> dict[Key, float]:
        """When each (pipeline, cluster, dp_rank) last stopped holding its GPUs (none kept in
        memory for a streamed record, whose open spans are all on held GPUs: the simulator's)."""
        ends: dict[Key, float] = {}
        for pipeline_id, cluster, _priority, dp_rank, _gpu, _t_start, t_end in self.allocations:
            key = (pipeline_id, cluster, dp_rank)
            ends[key] = max(t_end, ends.get(key, t_end))
        return ends

    def resume(self, resumed: dict[str, Any]) -> None:
        """Go on after a cut: the record so far stays, a segment line marks where a fresh core
        took over (`resumed`: what each pipeline started again from), the clock goes on from
        `end_s`."""
        if not self.finished:
            raise ValueError("finish() the cut record first: its holdings end at the cut")
        self._line(json.dumps({SEGMENT: {"at_s": self.end_s, "resumed": resumed}}))
        self.finished = False

    def finish(self, now: float) -> None:
        """Close whatever is still held, and whatever activity still goes on, at the end of the run."""
        ends: dict[Key, float] | None = None
        for token, span in list(self._open_activity.items()):
            key, end = (span[0], span[1], span[2]), now
            if key not in self._open:
                # Its GPUs were already given back, so it ended by then: it was told open, and its
                # end had not reached the record yet (a live pipeline tells it at its next flush).
                ends = self._holding_ends() if ends is None else ends
                end = min(now, ends.get(key, now))
            self.close_activity(token, end)
        for key in list(self._open):
            self._close(key, now)
        self.end_s = now
        self.finished = True
