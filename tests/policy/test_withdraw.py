"""RequestWithdrawn: a pipeline gives up a request that was not granted (or ends its rollout
demand), and nothing of it is left behind: no queue entry, no reservation, no rank."""

from __future__ import annotations

import pytest

from rlix.policy import (
    ClusterRequested,
    EventError,
    GpuLost,
    GpuRestored,
    Grant,
    PolicyConfig,
    RequestWithdrawn,
    Topology,
)
from tests.policy.builders import full_finetune
from tests.policy.digest import digest
from tests.policy.drive import Driver, grants

ALL = (0, 1, 2, 3)


def test_a_withdrawn_request_leaves_the_queue_and_frees_its_reservation() -> None:
    d = Driver(Topology(1, 4))
    d.add(full_finetune("A", ALL, (0, 1)), full_finetune("B", ALL, (1, 2)), full_finetune("C", ALL, (2, 3)))
    d.send(ClusterRequested(0, "A", "actor_train", 1))
    d.apply_all()
    d.send(ClusterRequested(0, "B", "actor_train", 1))  # blocked by A, reserves 1 and 2
    assert d.send(ClusterRequested(0, "C", "actor_train", 1)) == ["hold C/actor_train: GPU 2 is reserved for B/actor_train"]
    assert grants(d.send(RequestWithdrawn(1, "B", "actor_train"))) == ["grant C/actor_train [2, 3]"]
    assert not d.sched.pipelines["B"].pending and all(r.pipeline_id != "B" for r in d.sched.queue)
    # B may ask again later, as a new request (at the back of the queue).
    d.send(ClusterRequested(2, "B", "actor_train", 1))
    assert d.sched.queue[-1].pipeline_id == "B"


def test_a_request_requeued_by_a_revoke_can_be_withdrawn() -> None:
    d = Driver(Topology(1, 4))
    d.add(full_finetune("A", (2, 3), (0, 1)))
    d.send(ClusterRequested(0, "A", "actor_train", 1))
    d.apply_all()
    d.send(GpuLost(1, 1))  # revokes the holding, re-queues the request
    assert "actor_train" in d.sched.pipelines["A"].pending
    d.send(RequestWithdrawn(2, "A", "actor_train"))
    assert not d.sched.queue
    assert not any(isinstance(x, Grant) for x in d.sched.handle(GpuRestored(3, 1)))


def test_a_withdrawn_rollout_ends_the_demand_started_or_not() -> None:
    # Without warm ranks (no one else wants GPUs 1-3: B's ranks would stay loaded).
    d = Driver(Topology(1, 4), PolicyConfig(keep_warm=False))
    d.add(full_finetune("A", ALL, (0,)), full_finetune("B", ALL, (1,)))
    d.send(ClusterRequested(0, "A", "actor_train", 1))
    d.apply_all()
    # Not started: B's rollout got the free GPUs 1-3 but nothing was applied yet.
    lines = d.send(ClusterRequested(1, "B", "actor_infer", 6, 10))
    assert lines == ["expand B1", "expand B2", "expand B3"]
    assert d.send(RequestWithdrawn(1, "B", "actor_infer")) == []
    assert not d.sched.pipelines["B"].rolling
    d.apply_all()  # each Expand, once applied, is released at once
    assert d.held("B") == 0
    # Started and running: shrunk as by a release.
    d.send(ClusterRequested(2, "B", "actor_infer", 6, 10))
    d.apply_all()
    assert d.send(RequestWithdrawn(3, "B", "actor_infer")) == [f"shrink B{r} release" for r in (1, 2, 3)]


@pytest.mark.parametrize(
    ("cluster", "problem"),
    [("actor_train", "already granted"), ("critic", "no such cluster"), ("actor_infer", "no pending request")],
)
def test_nothing_to_withdraw_is_an_error_and_changes_nothing(cluster: str, problem: str) -> None:
    d = Driver(Topology(1, 4))
    d.add(full_finetune("A", ALL, (0,)))
    d.send(ClusterRequested(0, "A", "actor_train", 1))  # granted, not yet applied
    before = digest(d.sched)
    with pytest.raises(EventError, match=problem) as info:
        d.sched.handle(RequestWithdrawn(1, "A", cluster))
    assert info.value.field == "cluster"
    assert digest(d.sched) == before
