"""What a run's event log says happened, counted from `events.jsonl` alone.

`rlix-sim check` compares the tables of a run folder with these counts, and `rlix-sim replay`
compares the end of the log with `summary.json`. The counts are made here, from the events and
decisions as recorded, and never by the code that wrote the tables (the recorder, the hosts,
the metrics): a checker that ran the code it checks would share its bugs.

- Holdings: every `Grant` and `Expand` puts one allocation row per GPU in the table once the
  driver carries it out. A decision reported applied was carried out, so it has its rows; one
  reported failed has none, unless a `Revoke` closed its holding first; one never reported
  (its pipeline went away, the run ended or was cut) may have them or not. So per pipeline,
  cluster, rank and GPU the table holds at least the applied and at most the possible rows.
- Waits: a `Grant` applied ends the wait of the request it answers (one row); after a `Revoke`
  the request waits again, and the grant in flight may end that wait instead, so a revoked
  holding's grants can count one row fewer. The row's request time is a request event's (or,
  for a request a Revoke queued again, at or after that revoke), and
  its grant time lies between the grant's decision and the holding's end (its release, a
  revoke, or the pipeline's removal): a driver notes it when it sees the grant carried out.
- Steps: each `TrainStepFinished` after its pipeline's admission ends one step (version - 1),
  at that event's time.
  A resumed run (segment lines) throws away the steps a restarted pipeline redoes: it registers
  again and, before its admission, reports the versions its checkpoint holds; the steps below
  those stay, the rest leave the steps table (they are trained again, and counted again, later).
- Trained steps: every step trained consumed completed trajectories. A live pipeline hands
  its trajectories in every half second and at its clean end, so those of a pipeline that
  crashed, was killed or was cut may be missing its last ones (`trained_whole` leaves them out).
- Pipelines: registered, first admitted (when: its arrival), still running at the end of the
  log, removed (when, each time), the resumes' cuts (when), and the Shrink
  decisions of their rollout ranks by reason, as summary.json counts them.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlix.policy.specs import BASE_ADAPTER, ROLLOUT_CLUSTER
from rlix.runs.errors import RunError
from rlix.runs.eventlog import SEGMENT, numbered_lines

#: (pipeline, cluster, dp_rank, gpu): one GPU of one holding; dp_rank -1 for non-rollout clusters.
HoldKey = tuple[str, str, int, int]
#: (pipeline, adapter, step).
StepKey = tuple[str, str, int]
#: The only records that change a count (the rest of a long log, progress reports and Ticks,
#: is not parsed): matched as the quoted type names or the segment key.
_COUNTED = ('"Grant"', '"Expand"', '"Shrink"', '"Revoke"', '"DecisionApplied"', '"DecisionsApplied"', '"DecisionFailed"',
            '"TrainStepFinished"', '"PipelineRegistered"', '"PipelineAdmitted"', '"PipelineRemoved"',
            '"ClusterRequested"', '"ClusterReleased"', '"ClusterReleasedAndRequested"', '"segment"')


@dataclass
class _InFlight:
    """A Grant or Expand not yet reported applied or failed."""

    pipeline_id: str
    cluster: str
    dp_rank: int
    gpus: tuple[int, ...]
    #: When the core decided it (the time of the event it answered).
    decided_s: float = 0.0
    revoked: bool = False

    def keys(self) -> list[HoldKey]:
        return [(self.pipeline_id, self.cluster, self.dp_rank, gpu) for gpu in self.gpus]


@dataclass
class EventTally:
    """The counts of the module docstring; feed it the log's records in order (`add`)."""

    applied: Counter[HoldKey] = field(default_factory=Counter)
    possible: Counter[HoldKey] = field(default_factory=Counter)
    #: Applied grants and revoked non-rollout holdings, per (pipeline, cluster).
    grants_applied: Counter[tuple[str, str]] = field(default_factory=Counter)
    grants_revoked: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: Per pipeline, the (adapter, step)s whose training stands (the steps table's rows).
    steps: dict[str, set[tuple[str, int]]] = field(default_factory=dict)
    #: Every step trained, also those a resume threw away (their rollouts stay in the table).
    trained: set[StepKey] = field(default_factory=set)
    #: When each step trained last finished (its TrainStepFinished): the steps table's t_end.
    step_ends_s: dict[StepKey, float] = field(default_factory=dict)
    #: The steps trained by pipelines that then ended cleanly (removed, not failed) in the same
    #: segment: a live pipeline hands in its trajectories and work every half second and at
    #: its clean end, so a crash, a kill or a cut may lose the last ones of its steps.
    trained_whole: set[StepKey] = field(default_factory=set)
    registered: set[str] = field(default_factory=set)
    #: Registered and not removed since.
    running: set[str] = field(default_factory=set)
    #: Per (pipeline, cluster), when it was requested (ClusterRequested, or the requested half
    #: of ClusterReleasedAndRequested): a wait row's t_request.
    requests_s: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    #: Per (pipeline, non-rollout cluster), when a Revoke took its holding: the core queues
    #: the request again, and the driver notes it from when it sees the revoke.
    revokes_s: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    #: Per (pipeline, non-rollout cluster), each applied Grant's (decided, released) times: its
    #: wait row's t_grant lies between (released is inf while it was never given back).
    grant_spans_s: dict[tuple[str, str], list[list[float]]] = field(default_factory=dict)
    #: Per pipeline, when it was first admitted (a resumed run admits again): its arrival.
    admitted_s: dict[str, float] = field(default_factory=dict)
    #: Per pipeline, when it was last removed.
    removed_s: dict[str, float] = field(default_factory=dict)
    #: Per pipeline, every time it was removed (a resumed run may remove it in each segment).
    removals_s: dict[str, list[float]] = field(default_factory=dict)
    #: When each resume cut the run (its segment line's `at_s`).
    cuts_s: list[float] = field(default_factory=list)
    #: Shrink decisions per (pipeline, reason).
    shrinks: Counter[tuple[str, str]] = field(default_factory=Counter)
    last_now: float | None = None
    #: The number of the log's last line (`tally_file` sets it): where a log cut short ends.
    last_line: int = 0
    #: Pipelines driven through the executor's API (summary.json `api_pipelines`, set by the
    #: caller): their rollouts and their work run on their own engines, which rlix does not
    #: record, so no trajectory or work of theirs is asked for.
    untracked: frozenset[str] = frozenset()
    _in_flight: dict[int, _InFlight] = field(default_factory=dict)
    #: Pipelines registered again and not yet admitted: the steps of theirs held back.
    _starting: dict[str, set[tuple[str, int]]] = field(default_factory=dict)
    #: Per running pipeline, the steps it trained since it was registered.
    _training: dict[str, set[StepKey]] = field(default_factory=dict)
    #: The span of each (pipeline, cluster)'s applied Grant not yet given back.
    _holding: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def add(self, record: dict[str, Any]) -> None:
        """One record of the log (after the header): an event with its decisions, or a segment."""
        if isinstance(record.get(SEGMENT), dict):
            at_s = record[SEGMENT].get("at_s")
            if isinstance(at_s, int | float):
                self.cuts_s.append(float(at_s))
            # A fresh core took over: decision ids start again, and the old core's decisions
            # in flight are never reported (what they may have held stays possible).
            self._in_flight.clear()
            self._training.clear()
            self._holding.clear()  # the old core's holdings end with it; their spans stay open
            return
        event = record["event"]
        self.last_now = float(event["now"])
        self._event(event)
        for decision in record["decisions"]:
            self._decision(decision)

    def _event(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "PipelineRegistered":
            pid = str(event["spec"]["pipeline_id"])
            self.registered.add(pid)
            self.running.add(pid)
            self._starting[pid] = self.steps.pop(pid, set())
            self._training[pid] = set()
        elif kind == "PipelineAdmitted":
            self._starting.pop(event["pipeline_id"], None)
            self.admitted_s.setdefault(str(event["pipeline_id"]), float(event["now"]))
        elif kind in ("ClusterRequested", "ClusterReleased", "ClusterReleasedAndRequested"):
            self._cluster_event(event)
        elif kind == "PipelineRemoved":
            pid = str(event["pipeline_id"])
            self._given_back(pid, None, float(event["now"]))
            self.running.discard(pid)
            self.removed_s[pid] = float(event["now"])
            self.removals_s.setdefault(pid, []).append(float(event["now"]))
            trained = self._training.pop(pid, set())
            if not event.get("failed"):
                self.trained_whole |= trained
        elif kind == "TrainStepFinished":
            self._step(str(event["pipeline_id"]), event.get("adapter") or BASE_ADAPTER, int(event["version"]),
                       float(event["now"]))
        elif kind in ("DecisionApplied", "DecisionsApplied"):
            ids = [event["decision_id"]] if kind == "DecisionApplied" else event["decision_ids"]
            for decision_id in ids:
                self._applied(int(decision_id))
        elif kind == "DecisionFailed":
            done = self._in_flight.pop(int(event["decision_id"]), None)
            if done is not None and not done.revoked:  # a revoked holding was closed with rows
                self.possible.subtract(done.keys())

    def _cluster_event(self, event: dict[str, Any]) -> None:
        pid, now = str(event["pipeline_id"]), float(event["now"])
        released = event.get("released", event["cluster"] if event["type"] == "ClusterReleased" else None)
        if released is not None:
            self._given_back(pid, str(released), now)
        requested = event.get("requested", event["cluster"] if event["type"] == "ClusterRequested" else None)
        if requested is not None:
            self.requests_s.setdefault((pid, str(requested)), []).append(now)

    def _given_back(self, pid: str, cluster: str | None, now: float) -> None:
        """`pid`'s holding of `cluster` (None: of every cluster) ends at `now`."""
        for key in [key for key in self._holding if key[0] == pid and cluster in (None, key[1])]:
            self._holding.pop(key)[1] = now

    def _step(self, pid: str, adapter: str, version: int, now: float) -> None:
        held = self._starting.get(pid)
        if held is not None:  # a resumed pipeline's checkpoint: the steps below it stand
            kept = {(a, step) for a, step in held if a == adapter and step < version}
            self.steps.setdefault(pid, set()).update(kept)
            return
        self.steps.setdefault(pid, set()).add((adapter, version - 1))
        self.trained.add((pid, adapter, version - 1))
        self.step_ends_s[(pid, adapter, version - 1)] = now  # a step trained again ends anew
        self._training.setdefault(pid, set()).add((pid, adapter, version - 1))

    def _applied(self, decision_id: int) -> None:
        done = self._in_flight.pop(decision_id, None)
        if done is None:  # not a Grant or Expand (a Shrink), or reported already
            return
        self.applied.update(done.keys())
        if done.dp_rank < 0:
            key = (done.pipeline_id, done.cluster)
            self.grants_applied[key] += 1
            span = [done.decided_s, float("inf")]
            self.grant_spans_s.setdefault(key, []).append(span)
            # Revoked before it was carried out: the driver may note its wait when it sees it
            # carried out, after the revoke, so its span stays open.
            if not done.revoked:
                self._holding[key] = span

    def _decision(self, decision: dict[str, Any]) -> None:
        kind = decision["type"]
        if kind == "Grant":
            moving = _InFlight(str(decision["pipeline_id"]), str(decision["cluster"]), -1,
                               tuple(int(g) for g in decision["gpus"]), self.last_now or 0.0)
        elif kind == "Expand":
            moving = _InFlight(str(decision["pipeline_id"]), ROLLOUT_CLUSTER, int(decision["dp_rank"]),
                               tuple(int(g) for g in decision["gpus"]))
        elif kind == "Shrink":
            self.shrinks[(str(decision["pipeline_id"]), str(decision["reason"]))] += 1
            return
        elif kind == "Revoke":
            self._revoke(str(decision["pipeline_id"]), str(decision["cluster"]), int(decision.get("dp_rank", -1)))
            return
        else:
            return
        self._in_flight[int(decision["decision_id"])] = moving
        self.possible.update(moving.keys())

    def _revoke(self, pid: str, cluster: str, dp_rank: int) -> None:
        now = self.last_now or 0.0
        for moving in self._in_flight.values():
            if (moving.pipeline_id, moving.cluster, moving.dp_rank) == (pid, cluster, dp_rank):
                moving.revoked = True
        if dp_rank < 0:
            self.grants_revoked[(pid, cluster)] += 1
            self._given_back(pid, cluster, now)
            self.revokes_s.setdefault((pid, cluster), []).append(now)

    def num_steps(self, pipeline_id: str) -> int:
        """The steps of `pipeline_id` whose training stands (its rows of the steps table)."""
        return len(self.steps.get(pipeline_id, ()))

    def step_keys(self) -> set[StepKey]:
        return {(pid, adapter, step) for pid, done in self.steps.items() for adapter, step in done}


def tally_file(path: Path) -> EventTally:
    """The tally of the events file `path` (its header checked by the caller). Only the lines
    that can change a count are parsed. RunError naming the line of a record it cannot read."""
    tally = EventTally()
    for number, line in numbered_lines(path):
        tally.last_line = number
        if not any(word in line for word in _COUNTED):
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise RunError(f"not JSON: {error.msg} (column {error.colno})", file=path, line=number) from error
        if number == 1 or not isinstance(record, dict) or "header" in record:
            continue
        try:
            tally.add(record)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise RunError(f"cannot count this record: {error!r}", file=path, line=number) from error
    return tally
