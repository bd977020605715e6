"""bench/exec_overhead.py labels an expand cold by whether a worker process started during it."""

from __future__ import annotations

import json

import pytest

from rlix.policy import ClusterRequested, DecisionApplied, DecisionsApplied, Event
from rlix.policy.decisions import Decision, Expand
from rlix.runs import codec
from tests.bench.bench_module import load

pytest.importorskip("ray")


def line(event: Event, decisions: list[Decision] = ()) -> str:  # type: ignore[assignment]
    return json.dumps({"event": codec.encode(event), "decisions": [codec.encode(d) for d in decisions]})


def alloc(pid: str, rank: int, gpu: int, t0: float, t1: float) -> tuple[object, ...]:
    return (pid, "actor_infer", 6, rank, gpu, t0, t1)


def test_cold_means_the_ranks_worker_process_started_between_carry_out_and_report() -> None:
    bench = load("exec_overhead")
    log = [
        json.dumps({"header": {}}),
        line(ClusterRequested(1.0, "p", "actor_infer", 6, 10), [
            Expand(1, "p", 0, (0,)), Expand(2, "p", 1, (1,)), Expand(3, "q", 2, (2,))]),
        line(DecisionApplied(1.2, 1)),
        line(DecisionsApplied(3.0, (2,))),  # expand 3 is never reported: failed or revoked
        line(ClusterRequested(6.0, "p", "actor_train", 1), [Expand(4, "p", 0, (0,))]),
        line(DecisionApplied(6.1, 4)),
    ]
    allocations = [alloc("p", 0, 0, 1.0, 5.0), alloc("p", 1, 1, 1.5, 9.0), alloc("p", 0, 0, 6.0, 9.0)]
    starts = [
        ("p", "dev0", 0.5),  # p's rank 0 worker was up before its first expand: warm
        ("q", "dev0", 1.1),  # another pipeline's worker on the same GPU: not p's
        ("p", "dev1", 2.5),  # p's rank 1 worker started while its expand waited: cold
        ("p", "dev1", 6.05),  # p's rank 1 worker again (replaced), during rank 0's second expand
    ]
    labelled = bench.label_expands(log, allocations, starts, lambda gpus: f"dev{gpus[0]}")
    assert labelled == [
        ("p", 0, pytest.approx(0.2), False),
        ("p", 1, pytest.approx(1.5), True),  # carried out at 1.5 (it waited on a shrink), reported at 3.0
        ("p", 0, pytest.approx(0.1), False),  # timed from its own carry-out, not the first one's
    ]


def test_a_slow_wake_is_not_called_cold() -> None:
    # 2 s to wake a worker that was already up is slow, not cold (the old rule said cold).
    bench = load("exec_overhead")
    log = [line(ClusterRequested(1.0, "p", "actor_infer", 6, 10), [Expand(1, "p", 0, (0,))]),
           line(DecisionApplied(3.0, 1))]
    labelled = bench.label_expands(log, [alloc("p", 0, 0, 1.0, 5.0)], [("p", "dev0", 0.2)], lambda g: f"dev{g[0]}")
    assert labelled == [("p", 0, pytest.approx(2.0), False)]
