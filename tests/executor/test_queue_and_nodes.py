"""Pure pieces of the executor (no Ray started): the rollout queue and the node order."""

from __future__ import annotations

import pytest

from rlix.executor.placement import HEAD_RESOURCE, NODE_INDEX_LABEL, node_order
from rlix.executor.trajectories import Attempt, RolloutQueue, Trajectory, attempt_columns
from rlix.runs.recorder import ROLLOUT_COLUMNS


def batch(adapter: str, step: int, n: int, first: int = 0) -> list[Trajectory]:
    return [Trajectory("p", adapter, step, first + i, i // 2, None, 3) for i in range(n)]


def test_queue_takes_one_adapter_at_a_time_and_counts_remaining() -> None:
    queue = RolloutQueue()
    queue.submit(batch("a", 0, 3))
    queue.submit(batch("b", 0, 2, first=10))
    assert queue.remaining() == {"a": 3, "b": 2}
    taken = queue.take(5)
    assert [t.adapter for t in taken] == ["a", "a", "a"]
    assert [t.adapter for t in queue.take(5)] == ["b", "b"]
    assert queue.take(5) == [] and queue.remaining() == {"a": 3, "b": 2}  # running still counts


def test_unfinished_go_back_first_with_their_prefix_and_batches_close() -> None:
    queue = RolloutQueue()
    queue.submit(batch("a", 0, 4))
    first = queue.take(2)
    first[0].response, first[0].done = [7, 7, 7], True
    first[1].response = [5]
    queue.put_back([first[1]])
    assert queue.complete([first[0]]) == []
    again = queue.take(1)
    assert again[0].trajectory_id == first[1].trajectory_id and again[0].response == [5]
    assert again[0].preemptions == 1
    rest = queue.take(10)
    for t in [*again, *rest]:
        t.done = True
    assert queue.complete(again + rest) == [("a", 0)]
    assert queue.remaining() == {"a": 0}
    assert sorted(t.trajectory_id for t in queue.batch("a", 0)) == [0, 1, 2, 3]


def test_queue_rejects_what_would_lose_or_double_count_work() -> None:
    queue = RolloutQueue()
    queue.submit(batch("a", 0, 2))
    with pytest.raises(ValueError, match="twice"):
        queue.submit(batch("a", 0, 2))
    (t,) = queue.take(1)
    with pytest.raises(ValueError, match="not a running trajectory"):
        queue.complete([t])  # not done
    t.done = True
    with pytest.raises(ValueError, match="cannot be re-queued"):
        queue.put_back([t])


def test_attempt_rows_have_every_rollout_column() -> None:
    t = Trajectory("p", "a", 2, 5, 0, None, 4, response=[1, 2], weight_version=1)
    columns = attempt_columns([Attempt(t, 3, 1, 0.5, 1.5, recomputed_tokens=2)])
    assert set(columns) == set(ROLLOUT_COLUMNS)
    assert columns["status"] == ["requeued"] and columns["response_tokens"] == [2]
    t.done = True
    assert attempt_columns([Attempt(t, 3, 1, 0.5, 1.5)])["status"] == ["completed"]


def test_node_order_is_deterministic() -> None:
    def node(node_id: str, address: str, gpus: float = 4, head: bool = False, label: str | None = None) -> dict:
        resources = {"GPU": gpus, **({HEAD_RESOURCE: 1.0} if head else {})}
        return {"NodeID": node_id, "Alive": True, "NodeManagerAddress": address, "Resources": resources,
                "Labels": {NODE_INDEX_LABEL: label} if label is not None else {}}

    nodes = [node("c", "10.0.0.3"), node("h", "10.0.0.9", head=True), node("b", "10.0.0.2"),
             node("small", "10.0.0.1", gpus=2), {**node("dead", "10.0.0.0"), "Alive": False}]
    assert node_order(nodes, 4) == ["h", "b", "c"]
    assert node_order(list(reversed(nodes)), 4) == ["h", "b", "c"]
    nodes.append(node("z", "10.0.0.99", label="0"))
    assert node_order(nodes, 4)[0] == "z"
