"""`DecisionsApplied`: several decisions reported applied in one event, one round after them.

Checked against the state the core exposes (holding and rank statuses, what is still in
flight), not against the handler's own bookkeeping; rejected events leave the state exactly as
it was (digest).
"""

from __future__ import annotations

import pytest

from rlix.policy import (
    ClusterRequested,
    DecisionApplied,
    DecisionFailed,
    DecisionsApplied,
    EventError,
    Expand,
    Grant,
    Shrink,
    Topology,
)
from rlix.policy.state import HoldStatus, RankStatus
from rlix.runs.codec import decode_event, encode
from tests.policy.builders import full_finetune
from tests.policy.digest import digest
from tests.policy.drive import Driver, rollout_only


def num_active(d: Driver, pipeline_id: str) -> int:
    return sum(r.status is RankStatus.ACTIVE for r in d.sched.pipelines[pipeline_id].ranks)


def expanding() -> tuple[Driver, list[Expand]]:
    """One pipeline rolling on 8 GPUs: eight Expands in flight."""
    d = Driver(Topology(1, 8))
    d.add(rollout_only("A", 1))
    decisions = d.sched.handle(ClusterRequested(0, "A", "actor_infer", 6, 100))
    return d, [x for x in decisions if isinstance(x, Expand)]


def test_every_reported_decision_is_applied() -> None:
    d, expands = expanding()
    assert len(expands) == 8
    d.sched.handle(DecisionsApplied(1, tuple(x.decision_id for x in expands)))
    assert num_active(d, "A") == 8
    assert not d.sched.ledger.inflight


def test_a_list_is_accepted_and_a_second_report_is_ignored() -> None:
    d, expands = expanding()
    ids = [x.decision_id for x in expands]
    d.sched.handle(DecisionsApplied(1, ids[:3]))  # type: ignore[arg-type]  (as JSON gives it)
    before = digest(d.sched)
    d.sched.handle(DecisionApplied(1, ids[0]))  # settled already: nothing changes
    assert digest(d.sched) == before
    assert num_active(d, "A") == 3


def shrinks_then_grant() -> tuple[Driver, list[Shrink], Grant]:
    """A rolls on 4 GPUs; B's training on {0, 1} needs two of A's ranks shrunk first."""
    d = Driver(Topology(1, 4))
    d.add(full_finetune("A", (0, 1, 2, 3), (0, 1)), full_finetune("B", (2, 3), (0, 1)))
    d.send(ClusterRequested(0, "A", "actor_infer", 6, 10))
    d.apply_all()
    decisions = d.sched.handle(ClusterRequested(0, "B", "actor_train", 1))
    shrinks = [x for x in decisions if isinstance(x, Shrink)]
    (grant,) = [x for x in decisions if isinstance(x, Grant)]
    assert set(grant.requires) == {s.decision_id for s in shrinks} and len(shrinks) == 2
    return d, shrinks, grant


def test_a_grant_after_its_shrinks_in_the_same_event_is_held() -> None:
    d, shrinks, grant = shrinks_then_grant()
    d.sched.handle(DecisionsApplied(1, (shrinks[0].decision_id, shrinks[1].decision_id, grant.decision_id)))
    assert d.sched.pipelines["B"].holdings["actor_train"].status is HoldStatus.HELD
    assert d.held("A") == 2


@pytest.mark.parametrize("order", ["grant first", "grant between"])
def test_a_grant_before_one_of_its_shrinks_is_rejected_and_nothing_changes(order: str) -> None:
    d, shrinks, grant = shrinks_then_grant()
    s0, s1, g = shrinks[0].decision_id, shrinks[1].decision_id, grant.decision_id
    ids = (g, s0, s1) if order == "grant first" else (s0, g, s1)
    before = digest(d.sched)
    with pytest.raises(EventError, match="decision_ids") as info:
        d.sched.handle(DecisionsApplied(1, ids))
    assert info.value.value == g
    assert digest(d.sched) == before
    d.sched.handle(DecisionsApplied(1, (s0, s1, g)))  # the same reports in order are fine
    assert d.sched.pipelines["B"].holdings["actor_train"].status is HoldStatus.HELD


@pytest.mark.parametrize(
    "ids, message",
    [((), "non-empty"), ((10**9,), "no decision"), ("2,3", "non-empty"), ((True,), "no decision")],
)
def test_bad_id_lists_are_rejected_and_nothing_changes(ids: object, message: str) -> None:
    d, _expands = expanding()
    before = digest(d.sched)
    with pytest.raises(EventError, match=message):
        d.sched.handle(DecisionsApplied(1, ids))  # type: ignore[arg-type]
    assert digest(d.sched) == before


def test_a_repeated_id_is_rejected_and_nothing_changes() -> None:
    d, expands = expanding()
    before = digest(d.sched)
    first = expands[0].decision_id
    with pytest.raises(EventError, match="twice"):
        d.sched.handle(DecisionsApplied(1, (first, expands[1].decision_id, first)))
    assert digest(d.sched) == before


def test_a_failed_decision_reported_applied_later_is_ignored() -> None:
    d, expands = expanding()
    d.sched.handle(DecisionFailed(1, expands[0].decision_id))
    d.sched.handle(DecisionsApplied(2, (expands[0].decision_id, expands[1].decision_id)))
    assert num_active(d, "A") == 1
    assert expands[1].decision_id not in d.sched.ledger.inflight


def test_events_jsonl_round_trip() -> None:
    event = DecisionsApplied(3.5, (7, 9, 11))
    assert decode_event(encode(event)) == event
