"""A tiny deterministic driver of the policy core: toy pipelines on virtual time.

It is not the simulator (no cost model, no traces replayed per sample): it is the smallest
honest driver, used by the liveness tests (it drives `Scheduler.handle` itself, as a policy test
may; drivers of the product go through `rlix.runs.Loop`). It needs no SimPy.

Each job: init (its actor_train at priority 0), then per step: roll out `work` units (each
active rollout GPU does `rate` units per second), old log-probs and actor training as gang
stages on actor_train, then the next step. Decisions made during one tick are carried out at
the start of the next (so a policy that undoes its own work every round costs time, as it
would on a real cluster); the loop can be told to fail some of them. Time moves in ticks of
`dt_s`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from rlix.policy import (
    ClusterReleased,
    ClusterReleasedAndRequested,
    ClusterRequested,
    Decision,
    DecisionApplied,
    DecisionFailed,
    Event,
    Expand,
    Grant,
    PipelineAdmitted,
    PipelineRegistered,
    PipelineRemoved,
    PipelineSpec,
    Priority,
    RanksProgressed,
    RolloutProgressed,
    Scheduler,
    Shrink,
    Tick,
    TrainStepFinished,
)
from rlix.policy.decisions import AllowRollout


@dataclass
class Job:
    spec: PipelineSpec
    num_steps: int
    work: float
    train_s: float = 2.0
    step: int = 0
    phase: str = "new"  # new, init, rollout, logprobs, train, done
    remaining: float = 0.0
    busy_until: float = 0.0
    allowed_step: int = -1
    finished_at: float | None = None
    granted: set[str] = field(default_factory=set)

    @property
    def pipeline_id(self) -> str:
        return self.spec.pipeline_id


class Loop:
    def __init__(self, sched: Scheduler, jobs: list[Job], dt_s: float = 1.0, rate: float = 1.0,
                 fail_every: int = 0, load_s: float = 0.0, preempt_loss_s: float = 0.0,
                 report_ranks: bool = False, per_rank: int = 1) -> None:
        """`load_s`: a rank generates only this long after its expansion (weight load);
        `preempt_loss_s`: a shrink of a rank that is still needed re-queues this many seconds
        of its work (its in-flight trajectories start over); `report_ranks`: report where the
        work is (RanksProgressed), as if each unit of remaining work were one trajectory and
        each active rank ran `per_rank` at a time, lowest ranks first."""
        self.sched = sched
        self.report_ranks = report_ranks
        self.per_rank = per_rank
        self.load_s = load_s
        self.preempt_loss_s = preempt_loss_s
        self.ready_at: dict[tuple[str, int], float] = {}
        self.jobs = {j.pipeline_id: j for j in jobs}
        self.dt_s = dt_s
        self.rate = rate
        self.fail_every = fail_every
        self.now = 0.0
        self.busy_gpu_s = 0.0  # GPU-seconds held by anyone, integrated tick by tick
        self.num_decisions = 0
        self.log: list[tuple[float, Decision]] = []
        self.failed_ids: set[int] = set()
        self.to_carry_out: deque[Decision] = deque()
        #: Called with every accepted event and its round's decisions (independent checks).
        self.observers: list[Callable[[Event, list[Decision]], None]] = []

    def send(self, event: Event) -> None:
        decisions = self.sched.handle(event)
        for observe in self.observers:
            observe(event, decisions)
        for decision in decisions:
            self.log.append((self.now, decision))
            self.to_carry_out.append(decision)

    def carry_out_pending(self) -> None:
        decisions, self.to_carry_out = self.to_carry_out, deque()
        for decision in decisions:
            for report in self._carry_out(decision):
                self.send(report)

    def _carry_out(self, decision: Decision) -> list[Event]:
        job = self.jobs.get(decision.pipeline_id)
        if isinstance(decision, AllowRollout) and job is not None:
            job.allowed_step = max(job.allowed_step, decision.max_step)
        if not isinstance(decision, Grant | Expand | Shrink):
            return []
        self.num_decisions += 1
        if self.failed_ids.intersection(decision.requires):
            self.failed_ids.add(decision.decision_id)
            return [DecisionFailed(self.now, decision.decision_id, "a requirement failed")]
        if self.fail_every and self.num_decisions % self.fail_every == 0:
            self.failed_ids.add(decision.decision_id)
            return [DecisionFailed(self.now, decision.decision_id, "injected")]
        if isinstance(decision, Grant) and job is not None and decision.pipeline_id in self.sched.pipelines:
            job.granted.add(decision.cluster)
        if isinstance(decision, Expand):
            self.ready_at[(decision.pipeline_id, decision.dp_rank)] = self.now + self.load_s
        if isinstance(decision, Shrink) and decision.reason != "release" and job is not None:
            if job.phase == "rollout":
                job.remaining += self.preempt_loss_s * len(decision.gpus) * self.rate
        return [DecisionApplied(self.now, decision.decision_id)]

    def start(self) -> None:
        for job in self.jobs.values():
            self.send(PipelineRegistered(self.now, job.spec))
            self.send(PipelineAdmitted(self.now, job.pipeline_id))
            self.send(ClusterRequested(self.now, job.pipeline_id, "actor_train", Priority.INIT))
            job.phase = "init"

    def run(self, max_time_s: float) -> dict[str, float]:
        self.start()
        while self.now < max_time_s and any(j.phase != "done" for j in self.jobs.values()):
            self.now += self.dt_s
            self.busy_gpu_s += (self.sched.topology.num_gpus - self.sched.cluster.num_free
                                - len(self.sched.cluster.offline)) * self.dt_s
            self.carry_out_pending()
            for job in self.jobs.values():
                self._advance(job)
            self.send(Tick(self.now))
        return {pid: j.finished_at for pid, j in self.jobs.items() if j.finished_at is not None}

    def _report_ranks(self, pid: str, trajectories: int) -> None:
        left = trajectories
        in_flight = []
        for rank in sorted(self.sched.pipelines[pid].active):
            running = min(self.per_rank, left)
            in_flight.append((rank, running))
            left -= running
        self.send(RanksProgressed(self.now, pid, tuple(in_flight), left))

    def _take_grant(self, job: Job, cluster: str) -> bool:
        if cluster in job.granted:
            job.granted.discard(cluster)
            return True
        return False

    def _advance(self, job: Job) -> None:
        pid = job.pipeline_id
        if job.phase == "init" and self._take_grant(job, "actor_train"):
            job.phase = "wait_rollout"
        if job.phase == "wait_rollout" and job.allowed_step >= job.step:
            job.phase, job.remaining = "rollout", job.work
            self.send(ClusterReleasedAndRequested(self.now, pid, "actor_train", "actor_infer", Priority.ROLLOUT, job.work))
        elif job.phase == "rollout":
            pipeline = self.sched.pipelines[pid]
            ready = [r for r in pipeline.active.values()
                     if self.ready_at.get((pid, r.dp_rank), 0.0) <= self.now]
            done = sum(len(r.gpus) for r in ready) * self.rate * self.dt_s
            job.remaining = max(0.0, job.remaining - done)
            if job.remaining > 0:
                self.send(RolloutProgressed(self.now, pid, job.remaining))
                if self.report_ranks:
                    self._report_ranks(pid, math.ceil(job.remaining))
            else:
                job.phase = "logprobs"
                self.send(ClusterReleasedAndRequested(self.now, pid, "actor_infer", "actor_train", Priority.OLD_LOG_PROBS))
        elif job.phase == "logprobs" and self._take_grant(job, "actor_train"):
            job.phase = "train"
            self.send(ClusterReleasedAndRequested(self.now, pid, "actor_train", "actor_train", Priority.ACTOR_TRAIN))
        elif job.phase == "train" and self._take_grant(job, "actor_train"):
            job.phase, job.busy_until = "training", self.now + job.train_s
        elif job.phase == "training" and self.now >= job.busy_until:
            job.step += 1
            for adapter in job.spec.adapter_names:
                self.send(TrainStepFinished(self.now, pid, job.step, None if adapter == "base" else adapter))
            if job.step >= job.num_steps:
                self.send(ClusterReleased(self.now, pid, "actor_train"))
                self.send(PipelineRemoved(self.now, pid))
                job.phase, job.finished_at = "done", self.now
            else:
                job.phase = "wait_rollout"
                self._advance(job)


def sequential_bound_s(jobs: list[Job], rate: float = 1.0) -> float:
    """Time to run every job alone, one after the other, on one GPU: a generous liveness bound."""
    return sum(j.num_steps * (j.work / rate + j.train_s + 8) + 8 for j in jobs) * 2 + 50
