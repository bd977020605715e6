"""Which rank gives way (rlix.policy.donors): donors are taken most rollout work left first,
then in admission order. Each case is worked out by hand."""

from __future__ import annotations

from rlix.policy import (
    ClusterRequested,
    ClusterSpec,
    PipelineKind,
    PipelineSpec,
    RolloutProgressed,
    Tick,
    Topology,
)
from tests.policy.drive import Driver, rollout_only


def a_and_b_rolling_out() -> Driver:
    """A and B (TP 1, admitted in that order) roll out on six GPUs, 100 trajectories each; C
    (TP 1) is admitted and asks for nothing yet."""
    d = Driver(Topology(1, 6))
    d.add(rollout_only("A", 1, 6), rollout_only("B", 1, 6), rollout_only("C", 1, 6))
    d.send(ClusterRequested(0, "A", "actor_infer", 6, estimate=100))
    d.apply_all()
    d.send(ClusterRequested(1, "B", "actor_infer", 6, estimate=100))
    d.apply_all()
    return d


def first_donor(a_left: int) -> str:
    """A and B (admitted in that order) roll out on three of six GPUs each, B with 100
    trajectories left and A with `a_left`; then C starts and takes its first bundle (its
    target is 2, and A and B are both above theirs, 2 each). Whose rank is shrunk first?"""
    d = a_and_b_rolling_out()
    d.send(RolloutProgressed(2, "A", a_left))
    assert (d.held("A"), d.held("B")) == (3, 3)
    lines = d.send(ClusterRequested(3, "C", "actor_infer", 6, estimate=100))
    assert d.sched.targets == {"A": 2, "B": 2, "C": 2}
    shrinks = [line for line in lines if line.startswith("shrink")]
    assert shrinks and lines[lines.index(shrinks[0]) + 1].startswith("expand C")
    return shrinks[0].split()[1][0]


def test_the_donor_with_the_most_work_left_gives_first() -> None:
    """A nearly finished pipeline is about to free its GPUs anyway: B (100 left) gives before
    A (80 left), though A was admitted first."""
    assert first_donor(80) == "B"


def test_at_equal_work_the_donor_admitted_first_gives_first() -> None:
    assert first_donor(100) == "A"


def test_a_pipeline_that_just_gave_a_rank_away_takes_none_from_donors() -> None:
    """A and B share six GPUs 3-3; at 100 C starts, and its first bundle is B's (the split:
    A 3, B 2, C 1). At 110 A nears its end (targets A 1, B 3, C 2): A is a donor, and C takes
    one of its ranks, but B, which gave a rank away at 100, takes none within the interval
    (90 s): the split does not undo itself for small gains. Past the interval it does."""
    d = a_and_b_rolling_out()
    d.send(RolloutProgressed(100, "A", 120))
    assert d.send(ClusterRequested(100, "C", "actor_infer", 6, estimate=100))[0].startswith("shrink B")
    d.apply_all()
    d.send(RolloutProgressed(110, "A", 10))
    d.apply_all()
    assert d.sched.targets == {"A": 1, "B": 3, "C": 2}
    assert {p: d.held(p) for p in "ABC"} == {"A": 2, "B": 2, "C": 2}
    d.send(Tick(191))
    d.apply_all()
    assert {p: d.held(p) for p in "ABC"} == {"A": 1, "B": 3, "C": 2}


def test_a_pipeline_a_relocation_took_ranks_from_takes_none_back_within_the_interval() -> None:
    """A (TP 1 on GPUs 0, 2, 3, 4) and B (TP 1 on 1, 3, 5) hold 0, 2, 4 and 1, 3, 5; C (TP 2)
    starts at 3 with targets A 3, B 1, C 2. Every bundle of C's holds a rank of A, which is at
    its target, so a relocation gives C GPUs 0-1 and makes A whole on GPU 3, B's: B gave two
    ranks away. At 4 B's work grows (targets A 1, B 3): A is now a donor, but B, which gave
    ranks away at 3, takes none back within the interval (90 s); past it, it does."""
    d = Driver(Topology(1, 6))
    d.add(
        PipelineSpec("A", PipelineKind.FULL_FINETUNE, {"actor_infer": ClusterSpec(1, (0, 2, 3, 4))}),
        PipelineSpec("B", PipelineKind.FULL_FINETUNE, {"actor_infer": ClusterSpec(1, (1, 3, 5))}),
        rollout_only("C", 2, 6),
    )
    d.send(ClusterRequested(0, "A", "actor_infer", 6, estimate=300))
    d.apply_all()
    d.send(ClusterRequested(1, "B", "actor_infer", 6, estimate=300))
    d.apply_all()
    d.send(RolloutProgressed(2, "B", 100))
    assert {p: gpus(d, p) for p in "AB"} == {"A": [0, 2, 4], "B": [1, 3, 5]}
    lines = d.send(ClusterRequested(3, "C", "actor_infer", 6, estimate=200))
    d.apply_all()
    assert d.sched.targets == {"A": 3, "B": 1, "C": 2}
    assert "expand C0" in lines and {p: gpus(d, p) for p in "ABC"} == {"A": [2, 3, 4], "B": [5], "C": [0, 1]}
    assert d.send(RolloutProgressed(4, "B", 1000)) == []
    assert d.sched.targets == {"A": 1, "B": 3, "C": 2}
    d.send(Tick(94))
    d.apply_all()
    assert {p: gpus(d, p) for p in "ABC"} == {"A": [2, 4], "B": [3, 5], "C": [0, 1]}


def gpus(d: Driver, pipeline_id: str) -> list[int]:
    return sorted(g for rank in d.sched.pipelines[pipeline_id].active.values() for g in rank.gpus)
