"""The job queue of the policies without sharing (rlix.policy.queueing), on gang jobs.

A gang job here arrives, asks for its whole home at once (actor_train at the init priority),
holds it for its duration and leaves: the shape a Slurm queue sees. The driver below carries
each grant out at once. What is checked is computed here, from the grants the core made:
FIFO order under `static`; under `static-backfill` the EASY promise (the job at the head of the
queue starts no later than the shadow time it had when it became the head, worked out here by
releasing the running jobs in the order they end); every job finishes; the core's own
invariant checker runs after every event.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlix.policy import (
    ClusterReleased,
    ClusterRequested,
    ClusterSpec,
    DecisionApplied,
    Grant,
    PipelineAdmitted,
    PipelineKind,
    PipelineRegistered,
    PipelineRemoved,
    PipelineSpec,
    PolicyConfig,
    Scheduler,
    Tick,
    Topology,
)
from rlix.policy.decisions import Place
from rlix.policy.queueing import JobQueue


@dataclass(frozen=True)
class GangJob:
    pipeline_id: str
    arrival_s: float
    duration_s: float
    size: int = 0  # a sized home
    home: tuple[int, ...] = ()  # or an explicit one
    estimate: bool = True  # whether the core is told its duration
    estimate_factor: float = 1.0  # the estimate the core is told, as a share of the duration

    def spec(self) -> PipelineSpec:
        if self.home:
            clusters = {"actor_train": ClusterSpec(1, self.home), "actor_infer": ClusterSpec(1, self.home)}
        else:
            clusters = {"actor_train": ClusterSpec(1, (), "home"), "actor_infer": ClusterSpec(1, (), "home")}
        return PipelineSpec(self.pipeline_id, PipelineKind.FULL_FINETUNE, clusters, home=self.home,
                            home_size=self.size,
                            runtime_estimate_s=self.duration_s * self.estimate_factor if self.estimate else None)


@dataclass
class QueueRun:
    start_s: dict[str, float]
    end_s: dict[str, float]
    gpus: dict[str, tuple[int, ...]]
    #: (time, waiting job ids in arrival order, running job ids) after each moment
    moments: list[tuple[float, list[str], list[str]]]


def run_queue(policy: str, topology: Topology, jobs: list[GangJob], config: PolicyConfig | None = None,
              ticks_s: tuple[float, ...] = (), sched: Scheduler | None = None) -> QueueRun:
    """The jobs through a core (`sched`, else a new one under `policy`), with a Tick (a round
    in which no job arrives or leaves) at each of `ticks_s`."""
    sched = sched or Scheduler(topology, policy, config, check_invariants=True)
    by_id = {job.pipeline_id: job for job in jobs}
    events: list[tuple[float, int, str, str]] = []  # (time, 0 end / 1 arrival / 2 tick, seq, job id)
    for index, job in enumerate(jobs):
        heapq.heappush(events, (job.arrival_s, 1, f"{index:04d}", job.pipeline_id))
    for tick_s in ticks_s:
        heapq.heappush(events, (tick_s, 2, "", ""))
    run = QueueRun({}, {}, {}, [])
    arrived: list[str] = []
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, _, pid = heapq.heappop(events)
            if kind == 2:
                decisions = sched.handle(Tick(now))
            elif kind == 1:
                arrived.append(pid)
                decisions = sched.handle(PipelineRegistered(now, by_id[pid].spec()))
                decisions += sched.handle(PipelineAdmitted(now, pid))
                decisions += sched.handle(ClusterRequested(now, pid, "actor_train", priority=0))
            else:
                run.end_s[pid] = now
                decisions = sched.handle(ClusterReleased(now, pid, "actor_train"))
                decisions += sched.handle(PipelineRemoved(now, pid))
            while decisions:
                decision = decisions.pop(0)
                if isinstance(decision, Place):
                    assert not by_id[decision.pipeline_id].home
                if isinstance(decision, Grant):
                    run.start_s[decision.pipeline_id] = now
                    run.gpus[decision.pipeline_id] = decision.gpus
                    job = by_id[decision.pipeline_id]
                    heapq.heappush(events, (now + job.duration_s, 0, "", decision.pipeline_id))
                    decisions += sched.handle(DecisionApplied(now, decision.decision_id))
        waiting = [pid for pid in arrived if pid not in run.start_s]
        running = [pid for pid in arrived if pid in run.start_s and pid not in run.end_s]
        run.moments.append((now, waiting, running))
    assert set(run.end_s) == set(by_id), "every job finishes"
    return run


@st.composite
def sized_jobs(draw: st.DrawFn, estimates: bool = True) -> tuple[Topology, list[GangJob]]:
    topology = Topology(draw(st.integers(1, 3)), draw(st.sampled_from([2, 4, 8])))
    num_jobs = draw(st.integers(1, 8))
    jobs = [
        GangJob(
            f"j{i}",
            float(draw(st.integers(0, 40))),
            float(draw(st.integers(1, 60))),
            size=draw(st.integers(1, topology.num_gpus)),
            estimate=estimates and draw(st.booleans() | st.just(True)),
        )
        for i in range(num_jobs)
    ]
    jobs.sort(key=lambda j: j.arrival_s)  # arrival order is the order they are handed in
    return topology, jobs


@settings(max_examples=200, deadline=None)
@given(sized_jobs())
def test_static_starts_jobs_in_arrival_order(case: tuple[Topology, list[GangJob]]) -> None:
    topology, jobs = case
    run = run_queue("static", topology, jobs)
    starts = [run.start_s[job.pipeline_id] for job in jobs]
    assert starts == sorted(starts)
    _no_gpu_shared_at_once(run)


@settings(max_examples=200, deadline=None)
@given(sized_jobs())
def test_backfill_never_delays_the_head(case: tuple[Topology, list[GangJob]]) -> None:
    topology, jobs = case
    by_id = {job.pipeline_id: job for job in jobs}
    run = run_queue("static-backfill", topology, jobs)
    _no_gpu_shared_at_once(run)
    promised: dict[str, float] = {}
    for now, waiting, running in run.moments:
        if not waiting or waiting[0] in promised:
            continue
        head = by_id[waiting[0]]
        if not all(by_id[pid].estimate for pid in running):
            promised[head.pipeline_id] = float("inf")
            continue
        # the shadow time: release the running jobs in the order they end until the head fits
        # (tp 1: any free GPUs will do)
        free = topology.num_gpus - sum(by_id[pid].size for pid in running)
        shadow = now
        for end, size in sorted((run.start_s[pid] + by_id[pid].duration_s, by_id[pid].size) for pid in running):
            if free >= head.size:
                break
            free += size
            shadow = end
        promised[head.pipeline_id] = shadow
    for pid, shadow in promised.items():
        assert run.start_s[pid] <= shadow + 1e-9, f"{pid} started at {run.start_s[pid]}, promised {shadow}"


@settings(max_examples=100, deadline=None)
@given(sized_jobs(estimates=False))
def test_backfill_without_estimates_is_fifo(case: tuple[Topology, list[GangJob]]) -> None:
    topology, jobs = case
    assert run_queue("static-backfill", topology, jobs).start_s == run_queue("static", topology, jobs).start_s


class _WorkedOutEachRound(JobQueue):
    """The queue without its kept answer: worked out again in every round."""

    def _unchanged(self, sched: Scheduler) -> frozenset[str] | None:
        return None


@settings(max_examples=200, deadline=None)
@given(sized_jobs(), st.lists(st.sampled_from([0.25, 0.5, 1.0, 1.5, 3.0]), min_size=8, max_size=8),
       st.lists(st.integers(0, 200), max_size=40))
def test_a_kept_answer_is_the_answer_worked_out_again(case: tuple[Topology, list[GangJob]], factors: list[float],
                                                       ticks: list[int]) -> None:
    """Rounds between arrivals and departures (ticks) reuse the queue's last answer; with
    estimates off by up to 4x either way, so running jobs pass their expected ends between
    rounds, every job starts when and where a queue worked out again each round starts it."""
    topology, jobs = case
    jobs = [GangJob(j.pipeline_id, j.arrival_s, j.duration_s, j.size, estimate=j.estimate, estimate_factor=f)
            for j, f in zip(jobs, factors, strict=False)]
    ticks_s = tuple(sorted({t / 2 for t in ticks}))
    for policy in ("static", "static-backfill"):
        got = run_queue(policy, topology, jobs, ticks_s=ticks_s)
        want = run_queue(policy, topology, jobs, ticks_s=ticks_s, sched=_queue_worked_out_each_round(topology, policy))
        assert (got.start_s, got.gpus) == (want.start_s, want.gpus)


def _queue_worked_out_each_round(topology: Topology, policy: str) -> Scheduler:
    sched = Scheduler(topology, policy, check_invariants=True)
    queue = sched.policy.queue  # type: ignore[attr-defined]
    sched.policy.queue = _WorkedOutEachRound(queue.confine, queue.backfill)  # type: ignore[attr-defined]
    return sched


def test_a_kept_answer_lapses_when_running_jobs_pass_their_expected_ends() -> None:
    """4 GPUs. b (1 GPU, expected to end at 20) arrives before a (2 GPUs, expected at 10);
    both run for 100 s. c wants 3 and waits: its reservation takes a's GPUs and the free GPU 3,
    so d (1 GPU, 100 s) may not backfill there. Once both have overrun (t > 20) the reservation
    releases them by arrival, b first, and then a: the head's GPUs become 0-2 and d starts on
    GPU 3 at the next round, a tick at 25, with no job arriving or leaving in between."""
    jobs = [GangJob("b", 0.0, 100.0, size=1, estimate_factor=0.2), GangJob("a", 0.0, 100.0, size=2, estimate_factor=0.1),
            GangJob("c", 1.0, 10.0, size=3), GangJob("d", 2.0, 100.0, size=1)]
    ticks_s = (5.0, 12.0, 15.0, 25.0, 30.0)
    for sched in (None, _queue_worked_out_each_round(Topology(1, 4), "static-backfill")):
        run = run_queue("static-backfill", Topology(1, 4), jobs, ticks_s=ticks_s, sched=sched)
        assert run.gpus["b"] == (0,) and run.gpus["a"] == (1, 2)
        assert run.start_s["d"] == 25.0 and run.gpus["d"] == (3,)


def test_backfill_by_hand() -> None:
    """4 GPUs. a takes 3 for 10 s; b wants 4 (waits for a: shadow 10); c wants 1 for 5 s
    (ends by 10: backfilled at once); d wants 1 for 20 s (would end past 10 and the head needs
    every GPU: waits). Static runs them in order."""
    topology = Topology(1, 4)
    jobs = [GangJob("a", 0, 10, size=3), GangJob("b", 1, 10, size=4), GangJob("c", 2, 5, size=1),
            GangJob("d", 3, 20, size=1)]
    backfill = run_queue("static-backfill", topology, jobs)
    assert backfill.start_s == {"a": 0, "b": 10, "c": 2, "d": 20}
    static = run_queue("static", topology, jobs)
    assert static.start_s == {"a": 0, "b": 10, "c": 20, "d": 20}


def test_overlapping_explicit_homes_take_turns() -> None:
    """a and b share GPUs 2-3; c is disjoint from both and passes b; d overlaps b, which waits
    ahead of it, so d waits for b (static never lets a later job delay an earlier one)."""
    topology = Topology(1, 8)
    jobs = [GangJob("a", 0, 10, home=(0, 1, 2, 3)), GangJob("b", 1, 10, home=(2, 3, 4, 5)),
            GangJob("c", 2, 10, home=(6, 7)), GangJob("d", 3, 5, home=(4, 5))]
    run = run_queue("static", topology, jobs)
    assert run.start_s == {"a": 0, "b": 10, "c": 2, "d": 20}
    shared = run_queue("rlix", topology, jobs)  # admitted at once; the gangs take turns on GPUs
    assert shared.start_s["c"] == 2 and shared.start_s["b"] == 10


@settings(max_examples=100, deadline=None)
@given(sized_jobs())
def test_sharing_policies_run_every_sized_job(case: tuple[Topology, list[GangJob]]) -> None:
    topology, jobs = case
    for policy in ("rlix", "gap-ratio", "sequential"):
        _no_gpu_shared_at_once(run_queue(policy, topology, jobs))


def _no_gpu_shared_at_once(run: QueueRun) -> None:
    spans = sorted((run.start_s[p], run.end_s[p], p) for p in run.start_s)
    for i, (_start, end, pid) in enumerate(spans):
        for other_start, _other_end, other in spans[i + 1 :]:
            if other_start >= end:
                break
            assert set(run.gpus[pid]).isdisjoint(run.gpus[other]), f"{pid} and {other} overlap"


@pytest.mark.parametrize(("policy", "config", "node"), [
    ("rlix", None, 1), ("rlix", PolicyConfig(stack_by_runtime=False), 0), ("gap-ratio", None, 0)])
def test_rlix_stacks_like_with_like(policy: str, config: PolicyConfig | None, node: int) -> None:
    """A long job takes node 0 and a short one node 1 (GPUs no home covers); a second short job
    must stack, both homes equally covered. rlix puts it with the short job (like with like);
    without the rule, and under the RLix model, it goes on the lowest GPU ids."""
    jobs = [GangJob("long", 0, 1000, size=4), GangJob("short", 1, 10, size=4), GangJob("short2", 2, 10, size=4)]
    run = run_queue(policy, Topology(2, 4), jobs, config)
    assert run.gpus["long"] == (0, 1, 2, 3) and run.gpus["short"] == (4, 5, 6, 7)
    assert run.gpus["short2"] == tuple(range(4 * node, 4 * node + 4))


@pytest.mark.parametrize(("config", "node"), [(None, 2), (PolicyConfig(alike_stack_depth=0), 1),
                                             (PolicyConfig(alike_reserve_homes=0.0), 1)])
def test_rlix_joins_its_kind_before_free_gpus_once_homes_must_overlap(config: PolicyConfig | None, node: int) -> None:
    """Long jobs on nodes 0 and 2 (a third stacked on node 0), a short one on node 1 that ends.
    The next long job finds node 1 free, but the homes cannot all be disjoint (16 GPUs of homes
    on 12): it joins the less covered long stack (rule 0), not node 1 (rule 1, without it, or
    with no homes' worth of the pool kept uncovered)."""
    jobs = [GangJob("L1", 0, 1000, size=4), GangJob("S1", 0, 5, size=4), GangJob("L2", 1, 1000, size=4),
            GangJob("L3", 2, 1000, size=4), GangJob("L4", 6, 1000, size=4)]
    run = run_queue("rlix", Topology(3, 4), jobs, config)
    assert (run.gpus["L1"], run.gpus["S1"], run.gpus["L2"]) == ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11))
    assert run.gpus["L4"] == tuple(range(4 * node, 4 * node + 4))


@pytest.mark.parametrize(("policy", "config", "node"), [
    ("rlix", None, 2), ("rlix", PolicyConfig(stack_by_departure=False), 0),
    ("rlix", PolicyConfig(alike_stack_depth=0), 2), ("rlix", PolicyConfig(alike_stack_depth=0, stack_by_departure=False), 0),
    ("gap-ratio", None, 0)])
def test_rlix_stacks_with_jobs_that_leave_together(policy: str, config: PolicyConfig | None, node: int) -> None:
    """Short jobs A (node 0, from 0 s) and B (node 2, from 80 s), a long one on node 1. At 90 s a
    third short job must stack, A's and B's homes equally covered: A has 10 s left, B 90 s, the
    new job 100 s. rlix joins B, with whom it is expected to leave (rule 0, or rule 2 when rule 0
    is off), and A's node empties at 100 s; without the rule, and under the RLix model, the
    lowest GPU ids: A's."""
    jobs = [GangJob("A", 0, 100, size=4), GangJob("X", 0, 1000, size=4), GangJob("B", 80, 100, size=4),
            GangJob("C", 90, 100, size=4)]
    run = run_queue(policy, Topology(3, 4), jobs, config)
    assert (run.gpus["A"], run.gpus["X"], run.gpus["B"]) == ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11))
    assert run.gpus["C"] == tuple(range(4 * node, 4 * node + 4))


@pytest.mark.parametrize(("config", "node"), [(None, 0), (PolicyConfig(stack_by_departure=False), 2)])
def test_rlix_times_a_stack_by_its_last_departure(config: PolicyConfig | None, node: int) -> None:
    """Short jobs A (node 0, from 0 s), B (node 2, from 40 s) and A2 (its home given: node 0,
    from 60 s), a long one on node 1. At 90 s a fourth short job C (100 s) must stack. Node 0
    is empty once A2 leaves, 70 s on; node 2 once B leaves, 50 s on (the mean of node 0's jobs'
    time left, 40 s, is further from C's 100 s than B's 50 s: it would pick node 2). rlix joins
    node 0, the stack that empties nearest C's own departure; without the rule, the least
    covered: node 2."""
    jobs = [GangJob("A", 0, 100, size=4), GangJob("X", 0, 1000, size=4), GangJob("B", 40, 100, size=4),
            GangJob("A2", 60, 100, home=(0, 1, 2, 3)), GangJob("C", 90, 100, size=4)]
    run = run_queue("rlix", Topology(3, 4), jobs, config)
    assert (run.gpus["A"], run.gpus["X"], run.gpus["B"]) == ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11))
    assert run.gpus["C"] == tuple(range(4 * node, 4 * node + 4))


def test_a_home_of_unknown_runtime_is_alike_to_none() -> None:
    """A live scenario may give only some jobs an estimate. The long jobs here have none: their
    stacks are not "alike" to the next long job (rule 0 would send it there), so it takes the
    node no home covers; and a second short job stacks with the short one, not on the stack
    whose runtime nobody knows (rule 2)."""
    jobs = [GangJob("L1", 0, 1000, size=4, estimate=False), GangJob("S1", 0, 5, size=4),
            GangJob("L2", 1, 1000, size=4, estimate=False), GangJob("L3", 2, 1000, size=4, estimate=False),
            GangJob("L4", 6, 1000, size=4)]
    run = run_queue("rlix", Topology(3, 4), jobs)
    assert run.gpus["L4"] == (4, 5, 6, 7)
    jobs = [GangJob("long", 0, 1000, size=4, estimate=False), GangJob("short", 1, 10, size=4),
            GangJob("short2", 2, 10, size=4)]
    run = run_queue("rlix", Topology(2, 4), jobs)
    assert run.gpus["short2"] == (4, 5, 6, 7)


@pytest.mark.parametrize("policy, config", [("rlix", None), ("gap-ratio", None),
                                            ("rlix", PolicyConfig(job_order="shortest", max_home_load=3.0))])
def test_sharing_policies_stack_homes_that_cannot_run_together(policy: str, config: PolicyConfig | None) -> None:
    """RLix's shape through the core: four 8-GPU jobs on 3 nodes of 4. The first home takes
    nodes 0-1; the others cannot fit on GPUs no home covers and stack exactly on it (spread
    over the least covered GPUs, they lay on three pairs of nodes). Their gangs take turns."""
    jobs = [GangJob(f"j{i}", 0, 10, size=8) for i in range(4)]
    run = run_queue(policy, Topology(3, 4), jobs, config)
    assert set(run.gpus.values()) == {tuple(range(8))}
    assert sorted(run.start_s.values()) == [0, 10, 20, 30]
    # a later, smaller job finds the node no home covers
    jobs.append(GangJob("small", 1, 5, size=4))
    run = run_queue(policy, Topology(3, 4), jobs, config)
    assert run.gpus["small"] == (8, 9, 10, 11) and run.start_s["small"] == 1
