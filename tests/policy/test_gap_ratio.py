"""The `gap-ratio` model against RLix's behaviour, in cases small enough to check by hand.

Each expected outcome is what RLix's planner does (shared/REFERENCE.md), worked out by hand in
the comments: R is remaining work, T the request's estimate, B the budget (idle GPUs plus the
GPUs of active ranks), ratio = R*tp / sum(R*tp), target = max(round_half_up(ratio*B/tp)*tp, tp),
gap = ratio - active/B. Where the model used to differ from RLix, the comment says what it did.
"""

from __future__ import annotations

from rlix.policy import (
    ClusterReleased,
    ClusterRequested,
    DecisionApplied,
    Event,
    Expand,
    Grant,
    PipelineAdmitted,
    PipelineRegistered,
    PipelineSpec,
    RolloutProgressed,
    Scheduler,
    Shrink,
    Tick,
    Topology,
)
from rlix.policy.decisions import describe
from tests.policy.builders import full_finetune


class Driver:
    """Applies every two-phase decision at once (each report is an event of its own), and
    returns the decisions an event led to, in order."""

    def __init__(self, num_gpus: int) -> None:
        self.sched = Scheduler(Topology(1, num_gpus), "gap-ratio", check_invariants=True)

    def add(self, *specs: PipelineSpec) -> None:
        for spec in specs:
            self.sched.handle(PipelineRegistered(0, spec))
            self.sched.handle(PipelineAdmitted(0, spec.pipeline_id))

    def send(self, event: Event) -> list[str]:
        lines: list[str] = []
        pending = [event]
        while pending:
            for d in self.sched.handle(pending.pop(0)):
                if isinstance(d, Grant | Expand | Shrink):
                    lines.append(describe(d))
                    pending.append(DecisionApplied(event.now, d.decision_id))
        return lines

    def active(self, pipeline_id: str) -> list[int]:
        return sorted(self.sched.pipelines[pipeline_id].active)


def test_a_donor_gives_up_at_most_its_shrink_budget_per_cycle() -> None:
    # 4 GPUs. D (TP 1) holds all four; A (TP 2) arrives with its ranks on (0, 1) and (2, 3).
    d = Driver(4)
    d.add(full_finetune("D", (0, 1, 2, 3), (0,)), full_finetune("A", (0, 1, 2, 3), (0,), tp=2))
    assert d.send(ClusterRequested(1, "D", "actor_infer", 6, estimate=1200)) == [f"expand D{r}" for r in range(4)]
    assert d.send(RolloutProgressed(2, "D", 1200)) == []
    # A pending, no report: R_A = T + T = 200, weight 400; D: R = 1200, weight 1200. B = 4.
    # ratio_D = 0.75, target round(3.0) = 3 ranks, so D may give up 4 - 3 = 1 rank. ratio_A =
    # 0.25, target max(round(0.5) * 2, 2) = 2. Each of A's bundles covers two of D's ranks: RLix
    # takes neither. (The model used to check only that D could lose one rank, then took two.)
    assert d.send(ClusterRequested(3, "A", "actor_infer", 6, estimate=100)) == []
    assert d.sched.targets == {"D": 3, "A": 2}
    assert d.active("D") == [0, 1, 2, 3]


def test_a_donor_may_give_two_ranks_to_one_bundle_when_its_budget_allows() -> None:
    d = Driver(4)
    d.add(full_finetune("D", (0, 1, 2, 3), (0,)), full_finetune("A", (0, 1, 2, 3), (0,), tp=2))
    d.send(ClusterRequested(1, "D", "actor_infer", 6, estimate=400))
    d.send(RolloutProgressed(2, "D", 400))
    # ratio_D = 400 / 800 = 0.5, target 2 ranks: D may give up 2. ratio_A = 0.5, target 2.
    # A's rank 0 takes D0 and D1 (rank 1 would do as well; the lower rank wins). Both shrinks
    # come before the expansion, as RLix carries out a cycle's shrinks first.
    assert d.send(ClusterRequested(3, "A", "actor_infer", 6, estimate=100)) == [
        "shrink D0 rebalance", "shrink D1 rebalance", "expand A0",
    ]


def test_candidates_are_ranked_by_the_victims_remaining_fraction() -> None:
    # 8 GPUs. B (TP 2) on (0,1) and (4,5); C (TP 2) on (2,3) and (6,7); A (TP 2) on (0,1), (2,3).
    d = Driver(8)
    d.add(
        full_finetune("B", (0, 1, 4, 5), (0,), tp=2),
        full_finetune("C", (2, 3, 6, 7), (0,), tp=2),
        full_finetune("A", (0, 1, 2, 3), (0,), tp=2),
    )
    d.send(ClusterRequested(1, "B", "actor_infer", 6, estimate=1000))
    d.send(ClusterRequested(1, "C", "actor_infer", 6, estimate=300))
    d.send(RolloutProgressed(2, "B", 300))  # R/T = 0.3, the most work left in absolute terms
    d.send(RolloutProgressed(2, "C", 250))  # R/T = 0.83
    assert d.active("B") == [0, 1] and d.active("C") == [0, 1]
    # A pending: R = 300, weight 600; B 600, C 500; sum 1700, B = 8. ratios 0.353, 0.353, 0.294:
    # every target is round(1.41 or 1.18) = 1 rank. A: gap 0.353 > 0. B and C: gap < 0, each may
    # give up 2 - 1 = 1 rank. A's rank 0 needs B0 (score -0.3), rank 1 needs C0 (score -0.83):
    # RLix takes from C, whose remaining fraction is larger. (The model used to compare
    # absolute remaining work, 300 > 250, and took from B.)
    assert d.send(ClusterRequested(3, "A", "actor_infer", 6, estimate=150)) == [
        "shrink C0 rebalance", "expand A1",
    ]


def test_at_equal_leading_fractions_fewer_victims_win() -> None:
    # 4 GPUs. B (TP 1) on 0, 1, 2; GPU 3 is free. A (TP 2): rank 0 on (0, 1), rank 1 on (2, 3).
    d = Driver(4)
    d.add(full_finetune("B", (0, 1, 2), (0,)), full_finetune("A", (0, 1, 2, 3), (0,), tp=2))
    d.send(ClusterRequested(1, "B", "actor_infer", 6, estimate=1000))
    assert d.active("B") == [0, 1, 2]
    d.send(RolloutProgressed(2, "B", 100))
    # A pending: R = 100, weight 200; B: 100, R/T = 0.1. B = 1 free + 3 = 4. ratio_B = 1/3,
    # target round(1.33) = 1 rank, so B may give up 2. ratio_A = 2/3, target round(1.33) * 2 = 2.
    # Rank 0 needs B0 and B1: (-0.1, -0.1); rank 1 needs B2 (GPU 3 is free): (-0.1,). The shorter
    # tuple wins although its rank is higher. (The model used to tie and take rank 0.)
    assert d.send(ClusterRequested(3, "A", "actor_infer", 6, estimate=50)) == ["shrink B2 rebalance", "expand A1"]
    assert d.active("B") == [0, 1]


def test_a_pipeline_preempted_to_zero_is_not_boosted_again() -> None:
    # 4 GPUs. A and B (TP 1) both on all four; C trains on 0, 1, 2.
    d = Driver(4)
    d.add(
        full_finetune("A", (0, 1, 2, 3), (0,)),
        full_finetune("B", (0, 1, 2, 3), (0,)),
        full_finetune("C", (3,), (0, 1, 2)),
    )
    d.send(ClusterRequested(1, "A", "actor_infer", 6, estimate=100))
    d.send(RolloutProgressed(2, "A", 100))
    # B pending: R = 300 + 300 = 600 against A's 100, B = 4: targets B round(3.43) = 3, A 1. In
    # one cycle A gives up three ranks (its budget is 4 - 1 = 3), all shrinks first.
    assert d.send(ClusterRequested(3, "B", "actor_infer", 6, estimate=300)) == [
        "shrink A0 rebalance", "shrink A1 rebalance", "shrink A2 rebalance",
        "expand B0", "expand B1", "expand B2",
    ]
    # C's training preempts all of B's ranks (B has not reported yet, so it is not planned).
    assert d.send(ClusterRequested(4, "C", "actor_train", 1)) == [
        "shrink B0 preempt", "shrink B1 preempt", "shrink B2 preempt", "grant C/actor_train [0, 1, 2]",
    ]
    # B reports 100 of 300 left. Its request was answered long ago: R_B = 100, no boost. B = 1
    # (A's rank 3): nothing can move (A may give up 1 - 1 = 0 ranks).
    assert d.send(RolloutProgressed(5, "B", 100)) == []
    # C is done: 3 GPUs free, B = 4. R_A = R_B = 100: targets 2 and 2. B is the most
    # under-served (gap/ratio 1 against 0.5): B0. Then A and B tie at 0.5 and "A" < "B": A1
    # (A0's GPU went to B0). Then B2. (The model used to boost B at zero active ranks: R_B = 400,
    # targets B round(3.2) = 3 and A 1, so B took GPUs 0, 1 and 2.)
    assert d.send(ClusterReleased(6, "C", "actor_train")) == ["expand B0", "expand A1", "expand B2"]
    assert d.sched.targets == {"A": 2, "B": 2}
    assert d.active("A") == [1, 3] and d.active("B") == [0, 2]


def test_a_pipeline_with_neither_report_nor_pending_request_is_skipped() -> None:
    # B's request was answered with its ranks but B has reported nothing since: RLix leaves B
    # out of the cycle (its GPUs count in no budget and it never donates), so A, arriving with
    # far more work, gets only the free GPU.
    d = Driver(4)
    d.add(full_finetune("B", (0, 1, 2), (0,)), full_finetune("A", (0, 1, 2, 3), (0,)))
    d.send(ClusterRequested(1, "B", "actor_infer", 6, estimate=10))
    assert d.send(ClusterRequested(2, "A", "actor_infer", 6, estimate=1000)) == ["expand A3"]
    assert d.active("B") == [0, 1, 2]
    # A's request is answered too: until it reports, neither is planned. A reports: alone, with
    # B = 1 (its own rank), it has its target.
    assert d.send(RolloutProgressed(3, "A", 1000)) == []
    # Once B reports, it is planned again: R_B = 10 against R_A = 1000, B = 4: A's target is
    # round(3.96) = 4, B's 1, so B may give up 3 - 1 = 2 ranks, and no more.
    assert d.send(RolloutProgressed(4, "B", 10)) == [
        "shrink B0 rebalance", "shrink B1 rebalance", "expand A0", "expand A1",
    ]


def test_kept_flaws_unnormalised_targets_and_the_floor_at_zero_demand() -> None:
    d = Driver(3)
    d.add(full_finetune("A", (0, 1, 2), (0,)), full_finetune("B", (0, 1, 2), (0,)), full_finetune("Z", (0, 1, 2), (0,)))
    d.send(ClusterRequested(1, "A", "actor_infer", 6, estimate=50))
    d.send(RolloutProgressed(1, "A", 50))
    d.send(ClusterRequested(2, "B", "actor_infer", 6, estimate=25))
    d.send(RolloutProgressed(3, "B", 50))
    # A and B: 50 each, B = 3: both targets round(1.5) = 2, summing to 4 > 3.
    assert d.sched.targets == {"A": 2, "B": 2}
    # Z rolls out, reports nothing left, and still keeps the one-bundle floor in its target.
    d.send(ClusterRequested(4, "Z", "actor_infer", 6, estimate=1))
    d.send(RolloutProgressed(5, "Z", 0))
    assert d.sched.targets["Z"] == 1


def test_a_rank_shrunk_for_a_blocked_request_is_not_re_expanded_in_the_same_cycle() -> None:
    # A trains on 0-3; B rolls out on 4-7; C's training needs 2-5 and is blocked by A. RLix
    # shrinks B's ranks on 4, 5 anyway (futile) and, in that cycle, does not touch them again.
    d = Driver(8)
    d.add(
        full_finetune("A", (0, 1), (0, 1, 2, 3)),
        full_finetune("B", (4, 5, 6, 7), (6, 7)),
        full_finetune("C", (0, 1), (2, 3, 4, 5)),
    )
    d.send(ClusterRequested(1, "A", "actor_train", 1))
    d.send(ClusterRequested(2, "B", "actor_infer", 6, estimate=100))
    d.send(RolloutProgressed(2, "B", 100))
    assert d.send(ClusterRequested(3, "C", "actor_train", 1)) == ["shrink B0 preempt", "shrink B1 preempt"]
    # The next cycle expands them again (nothing is reserved), and the one after shrinks them.
    assert d.send(Tick(4)) == ["expand B0", "expand B1"]
    assert d.send(Tick(5)) == ["shrink B0 preempt", "shrink B1 preempt"]


def test_no_round_while_a_rank_move_is_in_flight() -> None:
    sched = Scheduler(Topology(1, 2), "gap-ratio", check_invariants=True)
    for spec in (full_finetune("P", (0, 1), (0, 1)), full_finetune("Q", (0, 1), (0, 1))):
        sched.handle(PipelineRegistered(0, spec))
        sched.handle(PipelineAdmitted(0, spec.pipeline_id))
    expands = sched.handle(ClusterRequested(0, "P", "actor_infer", 6, estimate=1000))
    assert [describe(d) for d in expands] == ["expand P0", "expand P1"]
    # While P's ranks load, RLix's cycle is not over: Q's request waits, nothing is decided.
    assert sched.handle(ClusterRequested(0, "Q", "actor_train", 1)) == []
    assert sched.handle(DecisionApplied(1, expands[0].decision_id)) == []
    # Both loaded: the next cycle preempts both ranks and grants Q at once.
    decisions = sched.handle(DecisionApplied(1, expands[1].decision_id))
    assert [describe(d) for d in decisions] == ["shrink P0 preempt", "shrink P1 preempt", "grant Q/actor_train [0, 1]"]


def test_livelock_repro_finishes() -> None:
    """shared/repros/policy/repro_gap_ratio_livelock.py: a gang request blocked by a rank still
    loading used to preempt the active rank, which the planner re-expanded, for ever. The driver
    carries out every decision one tick after it was emitted."""
    sched = Scheduler(Topology(1, 2), "gap-ratio", check_invariants=True)
    out: list[Grant | Expand | Shrink] = []

    def send(event: Event) -> None:
        out.extend(d for d in sched.handle(event) if isinstance(d, Grant | Expand | Shrink))

    for spec in (full_finetune("P", (0, 1), (0, 1)), full_finetune("Q", (0, 1), (0, 1))):
        send(PipelineRegistered(0.0, spec))
        send(PipelineAdmitted(0.0, spec.pipeline_id))
    send(ClusterRequested(0.0, "P", "actor_infer", 6, 1000.0))
    send(ClusterRequested(0.0, "Q", "actor_train", 1))
    granted_at = None
    num_applied = 0
    for t in range(1, 100):
        batch, out[:] = list(out), []
        for d in batch:
            if d.decision_id in sched.ledger.inflight:
                num_applied += 1
                send(DecisionApplied(float(t), d.decision_id))
                if isinstance(d, Grant):
                    granted_at = t
        send(Tick(float(t)))
    assert granted_at == 2  # expansions carried out at t=1, then the preemption and the grant
    assert num_applied == 5  # 2 expansions, 2 shrinks, 1 grant: nothing more moves after that
