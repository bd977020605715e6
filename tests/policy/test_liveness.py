"""Liveness (invariant 10): random finite workloads driven to completion finish, no deadlock.

Besides the core's own checker, every round is replayed by `tests.policy.replay_model` (GPU
conservation against the core's owner table, gang and bundle shapes, the pacing bound), and at
the end the decisions must have handed every GPU back.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlix.policy import POLICIES, Scheduler, Topology
from tests.policy.builders import pipeline_specs, topologies
from tests.policy.replay_model import DecisionReplay
from tests.policy.toy_driver import Job, Loop, sequential_bound_s

EXAMPLES = int(os.environ.get("RLIX_HYPOTHESIS_EXAMPLES", "500")) // 5


@st.composite
def workloads(draw: st.DrawFn) -> tuple[Topology, list[Job]]:
    topology = draw(topologies())
    jobs = [
        Job(
            draw(pipeline_specs(topology, f"p{i}")),
            num_steps=draw(st.integers(1, 3)),
            work=float(draw(st.integers(1, 60))),
            train_s=float(draw(st.integers(1, 5))),
        )
        for i in range(draw(st.integers(1, 4)))
    ]
    return topology, jobs


@pytest.mark.parametrize("policy", sorted(POLICIES))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload=workloads(), fail_every=st.sampled_from([0, 0, 7, 13]))
def test_every_pipeline_finishes(policy: str, workload: tuple[Topology, list[Job]], fail_every: int) -> None:
    topology, jobs = workload
    loop = Loop(Scheduler(topology, policy, check_invariants=True), jobs, fail_every=fail_every)
    replay = DecisionReplay(topology.num_gpus)
    loop.observers.append(lambda event, decisions: replay.observe(event, decisions, loop.sched))
    bound = sequential_bound_s(jobs) * (3 if fail_every else 1)
    finished = loop.run(max_time_s=bound)
    stuck = {j.pipeline_id: (j.phase, j.step) for j in jobs if j.pipeline_id not in finished}
    assert not stuck, f"not finished by t={bound}: {stuck}"
    assert not loop.sched.pipelines
    assert loop.sched.cluster.num_free == topology.num_gpus
    assert not replay.owner and not replay.inflight


def test_sharing_beats_running_one_after_another() -> None:
    """Two pipelines with long rollouts on 8 GPUs: rlix finishes both sooner than sequential."""
    from tests.policy.builders import full_finetune

    def makespan(policy: str) -> float:
        jobs = [
            Job(full_finetune("A", tuple(range(8)), (0, 1, 2, 3)), num_steps=3, work=80),
            Job(full_finetune("B", tuple(range(8)), (4, 5, 6, 7)), num_steps=3, work=80),
        ]
        return max(Loop(Scheduler(Topology(1, 8), policy), jobs).run(10_000).values())

    assert makespan("rlix") < makespan("sequential")
