"""rlix.runs.Loop: applied reports of one moment reach the core together when the driver gives
a `defer`, in the order they came, and one at a time when it does not; events without end at
one instant stop the run."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from rlix.policy import (
    ClusterRequested,
    PipelineAdmitted,
    PipelineRegistered,
    PolicyConfig,
    Scheduler,
    Tick,
    Topology,
)
from rlix.policy import decisions as dec
from rlix.policy import events as ev
from rlix.runs import Loop, Recorder
from rlix.runs import loop as loop_module
from rlix.runs.errors import LivelockError
from tests.policy.drive import rollout_only


class Keep:
    """An actuator that only keeps what it was asked to carry out (the test reports back)."""

    def __init__(self) -> None:
        self.carried: list[dec.Grant | dec.Expand | dec.Shrink] = []

    def carry_out(self, decision: dec.Grant | dec.Expand | dec.Shrink) -> None:
        self.carried.append(decision)

    def revoke(self, decision: dec.Revoke) -> None:
        pass

    def wake_at(self, at_s: float) -> None:
        pass


def rolling_loop(defer: Callable[[Callable[[], None]], None] | None) -> tuple[Loop, Keep]:
    topology = Topology(1, 4)
    actuator = Keep()
    scheduler = Scheduler(topology, "rlix", PolicyConfig(), check_invariants=True)
    loop = Loop(scheduler, Recorder(topology, "rlix", PolicyConfig()), actuator, lambda: 1.0, defer)
    loop.send(PipelineRegistered(0, rollout_only("A", 1, num_gpus=4)))
    loop.send(PipelineAdmitted(0, "A"))
    loop.send(ClusterRequested(0, "A", "actor_infer", 6, 100))
    assert len(actuator.carried) == 4
    return loop, actuator


def events(loop: Loop) -> list[dict[str, Any]]:
    return [json.loads(line)["event"] for line in loop.recorder.event_lines[1:]]


def test_reports_of_one_moment_become_one_event() -> None:
    deferred: list[Callable[[], None]] = []
    loop, actuator = rolling_loop(deferred.append)
    ids = [d.decision_id for d in actuator.carried]
    for decision_id in ids[:3]:
        loop.applied(decision_id)
    assert len(deferred) == 1  # one flush asked for, at the first report
    assert all(i in loop.scheduler.ledger.inflight for i in ids[:3])  # the core has not seen them
    deferred.pop()()
    assert events(loop)[-1] == {"type": "DecisionsApplied", "now": 1.0, "decision_ids": ids[:3]}
    assert not any(i in loop.scheduler.ledger.inflight for i in ids[:3])
    loop.applied(ids[3])  # alone in its moment: a plain DecisionApplied
    deferred.pop()()
    assert events(loop)[-1] == {"type": "DecisionApplied", "now": 1.0, "decision_id": ids[3]}


def test_another_event_sends_the_gathered_reports_first() -> None:
    deferred: list[Callable[[], None]] = []
    loop, actuator = rolling_loop(deferred.append)
    first, second = (d.decision_id for d in actuator.carried[:2])
    loop.applied(first)
    loop.failed(second, "no")
    assert [e["type"] for e in events(loop)[-2:]] == ["DecisionApplied", "DecisionFailed"]
    assert events(loop)[-2]["decision_id"] == first
    deferred.pop()()  # nothing left to send
    assert events(loop)[-1]["type"] == "DecisionFailed"


def test_without_defer_each_report_is_sent_at_once() -> None:
    loop, actuator = rolling_loop(None)
    ids = [d.decision_id for d in actuator.carried]
    for decision_id in ids:
        loop.applied(decision_id)
    assert [e.get("decision_id") for e in events(loop)[-4:]] == ids
    assert not loop.scheduler.ledger.inflight


def test_events_without_end_at_one_instant_stop_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A livelock (decisions undoing each other in no time) raises instead of hanging; a busy
    instant below the limit, and any number of events as time passes, do not."""
    monkeypatch.setattr(loop_module, "MAX_EVENTS_AT_ONE_INSTANT", 5)
    loop, _ = rolling_loop(None)
    for i in range(50):
        loop.send(Tick(2.0 + i))
    for _ in range(5):
        loop.send(Tick(100.0))
    with pytest.raises(LivelockError, match=r"5 events at t = 100\.000 s"):
        loop.send(Tick(100.0))


class _Scripted:
    """A core that, on a tick, preempts two of lora's ranks for its own training gang, and on
    lora's removal gives the freed GPUs to another job."""

    wake_at_s = float("inf")

    def handle(self, event: Any) -> list[dec.Decision]:
        if isinstance(event, ev.Tick):
            return [dec.Shrink(26, "lora", 0, (2,), "preempt"), dec.Shrink(27, "lora", 1, (3,), "preempt"),
                    dec.Grant(28, "lora", "actor_train", 3, (2, 3), requires=(26, 27))]
        if isinstance(event, ev.PipelineRemoved):
            return [dec.Grant(29, "other", "actor_train", 3, (2, 3))]
        return []


class _Silent:
    def on_event(self, event: Any, decisions: Any) -> None:
        pass

    def on_carry_out(self, decision: Any, now: float) -> None:
        pass

    def on_report(self, decision: Any, ok: bool, now: float) -> None:
        pass


def test_a_removed_pipelines_waiting_grant_is_never_carried_out() -> None:
    """lora is removed (killed, crashed) while its gang's grant waits on its own shrinks: the
    grant is void, and what the core decided on the removal (the GPUs to another job) is
    carried out. An actuator that applies a grant at once (the executor's) used to get the
    void grant, and the loop then failed with a KeyError before the new grant went out."""
    carried: list[int] = []

    class AppliesGrantsAtOnce:
        def carry_out(self, decision: Any) -> None:
            carried.append(decision.decision_id)
            if isinstance(decision, dec.Grant):
                loop.applied(decision.decision_id)

        def revoke(self, decision: Any) -> None:
            pass

        def wake_at(self, at_s: float) -> None:
            pass

    loop = Loop(_Scripted(), _Silent(), AppliesGrantsAtOnce(), clock=lambda: 0.0)  # type: ignore[arg-type]
    loop.send(ev.Tick(1.0))
    assert carried == [26, 27]
    loop.send(ev.PipelineRemoved(2.0, "lora", True))
    assert carried == [26, 27, 29] and loop.num_unsettled == 0
