"""Liveness under hold-and-wait (invariant 10): pipelines that hold clusters while they ask for
more always finish, whatever the reservations.

Each pipeline acquires a chain of gang clusters one at a time and keeps what it has while it
waits for the next (B holds actor_train and asks for its critic before releasing it), works,
then releases them all; some also roll out between chains, so rollout ranks are preempted and
lent around them. Chains acquire GPUs in increasing order (every GPU of the next cluster lies
above every GPU already held), the classic discipline under which the holdings themselves can
never wait on each other in a cycle: any deadlock would be one the scheduler made (see the
proof in rlix.policy.admission). Decisions are carried out one tick after they are made, and
some are made to fail.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlix.policy import (
    POLICIES,
    ClusterReleased,
    ClusterRequested,
    ClusterSpec,
    Decision,
    DecisionApplied,
    DecisionFailed,
    Event,
    Expand,
    Grant,
    PipelineAdmitted,
    PipelineKind,
    PipelineRegistered,
    PipelineRemoved,
    PipelineSpec,
    RolloutProgressed,
    Scheduler,
    Shrink,
    Tick,
    Topology,
)
from tests.policy.builders import topologies

EXAMPLES = int(os.environ.get("RLIX_HYPOTHESIS_EXAMPLES", "500")) // 5
GANG_CLUSTERS = ("actor_train", "critic", "reference")


@dataclass
class Chain:
    """One pipeline: its clusters in acquisition order, their priorities, how long it works
    once it holds them all, how many times it runs the chain, and rollout work between runs."""

    spec: PipelineSpec
    order: list[str]
    priorities: list[int]
    work_s: int
    num_runs: int
    rollout_work: float
    phase: str = "new"  # acquire, work, rollout, done
    next_index: int = 0
    busy_until: float = 0.0
    remaining: float = 0.0
    granted: set[str] = field(default_factory=set)

    @property
    def pipeline_id(self) -> str:
        return self.spec.pipeline_id

    def bound_s(self) -> float:
        return self.num_runs * (3 * len(self.order) + self.work_s + self.rollout_work + 6)


class HoldAndWaitLoop:
    def __init__(self, sched: Scheduler, chains: list[Chain], fail_every: int) -> None:
        self.sched = sched
        self.chains = {c.pipeline_id: c for c in chains}
        self.fail_every = fail_every
        self.now = 0.0
        self.to_carry_out: list[Decision] = []
        self.num_moves = 0
        self.failed: set[int] = set()

    def send(self, event: Event) -> None:
        self.to_carry_out += self.sched.handle(event)

    def carry_out(self) -> None:
        decisions, self.to_carry_out = self.to_carry_out, []
        for d in decisions:
            if not isinstance(d, Grant | Expand | Shrink):
                continue
            self.num_moves += 1
            if self.failed.intersection(d.requires) or (self.fail_every and self.num_moves % self.fail_every == 0):
                self.failed.add(d.decision_id)
                self.send(DecisionFailed(self.now, d.decision_id))
                continue
            chain = self.chains.get(d.pipeline_id)
            if isinstance(d, Grant) and chain is not None and d.pipeline_id in self.sched.pipelines:
                chain.granted.add(d.cluster)
            self.send(DecisionApplied(self.now, d.decision_id))

    def run(self, max_time_s: float) -> set[str]:
        for chain in self.chains.values():
            self.send(PipelineRegistered(self.now, chain.spec))
            self.send(PipelineAdmitted(self.now, chain.pipeline_id))
            self._request_next(chain)
        while self.now < max_time_s and any(c.phase != "done" for c in self.chains.values()):
            self.now += 1.0
            self.carry_out()
            for chain in self.chains.values():
                self._advance(chain)
            self.send(Tick(self.now))
        return {pid for pid, c in self.chains.items() if c.phase == "done"}

    def _request_next(self, chain: Chain) -> None:
        chain.phase = "acquire"
        cluster = chain.order[chain.next_index]
        self.send(ClusterRequested(self.now, chain.pipeline_id, cluster, chain.priorities[chain.next_index]))

    def _advance(self, chain: Chain) -> None:
        pid = chain.pipeline_id
        if chain.phase == "acquire" and chain.order[chain.next_index] in chain.granted:
            chain.next_index += 1
            if chain.next_index < len(chain.order):
                self._request_next(chain)  # hold what it has, ask for the next
            else:
                chain.phase, chain.busy_until = "work", self.now + chain.work_s
        elif chain.phase == "work" and self.now >= chain.busy_until:
            for cluster in reversed(chain.order):
                self.send(ClusterReleased(self.now, pid, cluster))
            chain.granted.clear()
            chain.next_index = 0
            chain.num_runs -= 1
            if chain.num_runs == 0:
                self.send(PipelineRemoved(self.now, pid))
                chain.phase = "done"
            elif chain.rollout_work:
                chain.phase, chain.remaining = "rollout", chain.rollout_work
                self.send(ClusterRequested(self.now, pid, "actor_infer", 6, chain.rollout_work))
            else:
                self._request_next(chain)
        elif chain.phase == "rollout":
            chain.remaining -= self.sched.pipelines[pid].num_active_gpus
            if chain.remaining > 0:
                self.send(RolloutProgressed(self.now, pid, chain.remaining))
            else:
                self.send(ClusterReleased(self.now, pid, "actor_infer"))
                self._request_next(chain)


@st.composite
def chains(draw: st.DrawFn, topology: Topology, pipeline_id: str) -> Chain:
    """Clusters on increasing, disjoint GPU ranges [a_1, b_1] < [a_2, b_2] < ..."""
    num_gpus = topology.num_gpus
    k = draw(st.integers(1, min(3, num_gpus)))
    starts = sorted(draw(st.lists(st.integers(0, num_gpus - 1), min_size=k, max_size=k, unique=True)))
    ends = [draw(st.integers(a, nxt - 1)) for a, nxt in zip(starts, starts[1:] + [num_gpus], strict=True)]
    order = list(GANG_CLUSTERS[:k])
    clusters = {name: ClusterSpec(1, tuple(range(a, b + 1))) for name, a, b in zip(order, starts, ends, strict=True)}
    rollout = draw(st.lists(st.integers(0, num_gpus - 1), min_size=1, max_size=num_gpus, unique=True))
    clusters["actor_infer"] = ClusterSpec(1, tuple(sorted(rollout)))
    return Chain(
        PipelineSpec(pipeline_id, PipelineKind.FULL_FINETUNE, clusters),
        order=order,
        priorities=draw(st.lists(st.integers(0, 5), min_size=k, max_size=k)),
        work_s=draw(st.integers(1, 4)),
        num_runs=draw(st.integers(1, 3)),
        rollout_work=float(draw(st.sampled_from([0, 0, 5, 20]))),
    )


@st.composite
def workloads(draw: st.DrawFn) -> tuple[Topology, list[Chain]]:
    topology = draw(topologies())
    return topology, [draw(chains(topology, f"p{i}")) for i in range(draw(st.integers(2, 5)))]


@pytest.mark.parametrize("policy", sorted(POLICIES))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload=workloads(), fail_every=st.sampled_from([0, 0, 0, 9]))
def test_hold_and_wait_chains_always_finish(policy: str, workload: tuple[Topology, list[Chain]], fail_every: int) -> None:
    topology, jobs = workload
    loop = HoldAndWaitLoop(Scheduler(topology, policy, check_invariants=True), jobs, fail_every)
    bound = (sum(j.bound_s() for j in jobs) * 2 + 50) * (3 if fail_every else 1)
    finished = loop.run(max_time_s=bound)
    stuck = {pid: (c.phase, c.order[c.next_index] if c.phase == "acquire" else "")
             for pid, c in loop.chains.items() if pid not in finished}
    assert not stuck, f"not finished by t={bound}: {stuck}; queue {[(r.pipeline_id, r.cluster, r.hold_reason) for r in loop.sched.queue]}"
    assert not loop.sched.pipelines
    assert loop.sched.cluster.num_free == topology.num_gpus


def test_the_reported_deadlock_finishes() -> None:
    """The hold-and-wait chain: B holds GPU 0 and asks for GPU 2; A wants {0, 1}, C {1, 2}."""
    def spec(pid: str, **clusters: tuple[int, ...]) -> PipelineSpec:
        return PipelineSpec(pid, PipelineKind.FULL_FINETUNE,
                            {"actor_infer": ClusterSpec(1, (3,)), **{n: ClusterSpec(1, g) for n, g in clusters.items()}})

    jobs = [
        Chain(spec("B", actor_train=(0,), critic=(2,)), ["actor_train", "critic"], [1, 2], 3, 1, 0.0),
        Chain(spec("A", actor_train=(0, 1)), ["actor_train"], [1], 3, 1, 0.0),
        Chain(spec("C", actor_train=(1, 2)), ["actor_train"], [1], 3, 1, 0.0),
    ]
    loop = HoldAndWaitLoop(Scheduler(Topology(1, 4), "rlix", check_invariants=True), jobs, fail_every=0)
    assert loop.run(max_time_s=100) == {"A", "B", "C"}
