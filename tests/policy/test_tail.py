"""Pipelines in their tail (RanksProgressed: nothing queued): the rlix policy keeps their busy
ranks, lends them nothing, and gives their idle ranks away first.

Random workloads with rank reports are driven to completion under the invariant checker; the
rule itself is checked from the decision stream here, by replaying what each report said: no
rebalance shrink hits a rank that its pipeline last reported busy while nothing was queued
(unless another pipeline's first bundle fits nowhere else: the one-bundle minimum comes
first), and no expansion goes to a pipeline in its tail.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings

from rlix.policy import (
    ClusterReleased,
    ClusterRequested,
    ClusterSpec,
    DecisionApplied,
    EventError,
    Expand,
    PipelineAdmitted,
    PipelineKind,
    PipelineRegistered,
    PipelineSpec,
    PolicyConfig,
    RanksProgressed,
    RolloutProgressed,
    Scheduler,
    Shrink,
    Topology,
)
from tests.policy.test_liveness import workloads
from tests.policy.toy_driver import Loop, sequential_bound_s

EXAMPLES = int(os.environ.get("RLIX_HYPOTHESIS_EXAMPLES", "500")) // 5


class WatchedLoop(Loop):
    """The toy loop, remembering each pipeline's last rank report and checking each decision."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.reports: dict[str, RanksProgressed] = {}
        self.num_checked = 0

    def send(self, event: object) -> None:
        pid = getattr(event, "pipeline_id", "")
        if isinstance(event, RanksProgressed):
            self.reports[pid] = event
        elif "actor_infer" in (getattr(event, "cluster", None), getattr(event, "requested", None),
                               getattr(event, "released", None)):
            self.reports.pop(pid, None)  # a rollout starts or ends: no report holds
        seen = len(self.log)
        had = {p.pipeline_id: p.num_active_gpus for p in self.sched.pipelines.values()}
        super().send(event)  # type: ignore[arg-type]
        new = [decision for _now, decision in self.log[seen:]]
        # The one-bundle minimum outranks the tail: a pipeline's first bundle may cut a busy
        # rank when it is the only place that bundle fits, and so may the ranks that make the
        # pipelines it displaced whole again (a relocation).
        # A first bundle is an expansion of a pipeline holding nothing at that point of the
        # round: also one that held GPUs when the round began and lost them to a preemption.
        holding = dict(had)
        first_bundles = []
        for d in new:
            if isinstance(d, Shrink):
                holding[d.pipeline_id] = holding.get(d.pipeline_id, 0) - len(d.gpus)
            elif isinstance(d, Expand):
                if not holding.get(d.pipeline_id):
                    first_bundles.append(d)
                holding[d.pipeline_id] = holding.get(d.pipeline_id, 0) + len(d.gpus)
        for_first_bundle = {required for d in first_bundles for required in d.requires}
        displaced = {d.pipeline_id for d in new if isinstance(d, Shrink) and d.decision_id in for_first_bundle}
        for_first_bundle |= {
            required for d in new if isinstance(d, Expand) and d.pipeline_id in displaced for required in d.requires
        }
        for decision in new:
            report = self.reports.get(getattr(decision, "pipeline_id", ""))
            if report is None or report.queued:
                continue
            busy = {rank for rank, n in report.in_flight if n > 0}
            if isinstance(decision, Shrink) and decision.dp_rank in busy and (
                decision.reason != "rebalance" or decision.decision_id in for_first_bundle
            ):
                # its trajectories are queued again: the pipeline is out of its tail
                self.reports.pop(decision.pipeline_id)
                continue
            held_at_busy = self._held_at_busy(decision.pipeline_id, report)
            if isinstance(decision, Shrink) and decision.reason == "rebalance" and held_at_busy:
                assert decision.dp_rank not in busy, f"rebalance cut busy tail rank {decision} in {new}, had {had}"
            if isinstance(decision, Expand) and held_at_busy:
                assert decision.dp_rank in busy, f"expanded a pipeline in its tail: {decision}"
                self.num_checked += 1

    def _held_at_busy(self, pipeline_id: str, report: RanksProgressed) -> bool:
        """Whether the core's target for the pipeline is the GPUs of its reported busy ranks
        (the rule gives way to other pipelines' first bundles when GPUs are short)."""
        pipeline = self.sched.pipelines.get(pipeline_id)
        if pipeline is None:
            return False
        busy = sum(len(pipeline.ranks[rank].gpus) for rank, n in report.in_flight if n > 0)
        return self.sched.targets.get(pipeline_id) == max(busy, pipeline.tp)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload=workloads())
def test_tails_keep_their_busy_ranks_and_every_pipeline_finishes(workload: tuple) -> None:
    topology, jobs = workload
    loop = WatchedLoop(Scheduler(topology, "rlix", check_invariants=True), jobs, report_ranks=True)
    finished = loop.run(max_time_s=sequential_bound_s(jobs))
    assert set(finished) == {j.pipeline_id for j in jobs}


def _two_pipelines(keep: bool) -> tuple[Scheduler, list[object]]:
    """One node of 4. A rolls out on all 4 GPUs; B then asks for rollout on the same 4."""
    sched = Scheduler(Topology(1, 4), "rlix", PolicyConfig(keep_busy_tail=keep, min_rebalance_interval_s=0))
    decisions: list[object] = []
    for pid in ("A", "B"):
        spec = PipelineSpec(pid, PipelineKind.FULL_FINETUNE, {"actor_infer": ClusterSpec(1, (0, 1, 2, 3))})
        sched.handle(PipelineRegistered(0.0, spec))
        sched.handle(PipelineAdmitted(0.0, pid))
    for d in sched.handle(ClusterRequested(1.0, "A", "actor_infer", priority=6, estimate=100)):
        sched.handle(DecisionApplied(1.0, d.decision_id))
    sched.handle(RolloutProgressed(2.0, "A", 3))
    # A's three trajectories left run on ranks 0, 2 and 3; rank 1 is idle, nothing is queued.
    sched.handle(RanksProgressed(2.0, "A", ((0, 1), (1, 0), (2, 1), (3, 1)), 0))
    decisions += sched.handle(ClusterRequested(3.0, "B", "actor_infer", priority=6, estimate=100))
    return sched, decisions


def test_by_hand_the_idle_rank_goes_and_the_busy_ones_stay() -> None:
    sched, decisions = _two_pipelines(keep=True)
    shrinks = [d for d in decisions if isinstance(d, Shrink)]
    assert [(d.pipeline_id, d.dp_rank) for d in shrinks] == [("A", 1)]
    assert sched.targets == {"A": 3, "B": 1}
    _, decisions = _two_pipelines(keep=False)  # by remaining work alone B gets most, busy or not
    shrunk = {d.dp_rank for d in decisions if isinstance(d, Shrink)}
    assert len(shrunk) >= 2 and shrunk & {0, 2, 3}


def test_bad_rank_reports_are_refused() -> None:
    sched, _ = _two_pipelines(keep=True)
    for pairs, queued in [(((9, 1),), 0), (((0, 1), (0, 2)), 0), (((0, -1),), 0), ((), -1), (((0, True),), 0)]:
        with pytest.raises(EventError):
            sched.handle(RanksProgressed(4.0, "A", pairs, queued))
    with pytest.raises(EventError, match="not rolling"):
        spec = PipelineSpec("C", PipelineKind.FULL_FINETUNE, {"actor_infer": ClusterSpec(1, (0,))})
        sched.handle(PipelineRegistered(4.0, spec))
        sched.handle(RanksProgressed(4.0, "C", (), 0))


@pytest.mark.parametrize("policy", ["rlix", "static", "gap-ratio"])
def test_work_handed_back_after_the_report_is_not_stranded(policy: str) -> None:
    """A report made while a rank was being shrunk: its trajectories were neither queued nor on
    an active rank yet (a live run, static policy: the pipeline then sat forever with work left
    and no rank). Nothing queued and nothing running is no tail: the pipeline gets its ranks
    back once the GPUs are free."""
    sched = Scheduler(Topology(1, 2), policy)
    spec = PipelineSpec("A", PipelineKind.FULL_FINETUNE, {"actor_infer": ClusterSpec(1, (0, 1)),
                                                          "actor_train": ClusterSpec(1, (0, 1))})
    sched.handle(PipelineRegistered(0.0, spec))
    sched.handle(PipelineAdmitted(0.0, "A"))
    for d in sched.handle(ClusterRequested(1.0, "A", "actor_infer", priority=6, estimate=16)):
        sched.handle(DecisionApplied(1.0, d.decision_id))
    assert sched.pipelines["A"].num_active_gpus == 2
    shrinks = sched.handle(ClusterRequested(2.0, "A", "actor_train", priority=3))  # training preempts rollout
    sched.handle(RolloutProgressed(2.1, "A", 8))
    sched.handle(RanksProgressed(2.1, "A", (), 0))  # sent while both ranks were leaving
    for d in shrinks:
        sched.handle(DecisionApplied(2.2, d.decision_id))
    assert not sched.pipelines["A"].in_tail
    expands = sched.handle(ClusterReleased(2.5, "A", "actor_train"))
    assert sorted(d.dp_rank for d in expands if isinstance(d, Expand)) == [0, 1]
