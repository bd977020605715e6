"""The inlined free fit of `rlix.policy.rollout._move_to_targets` after a first bundle on a
home kept back (`RoundPlanner.kept_back_fit`): it must defer to `free_fit` whenever the
pipeline may not use some free bundles (`RoundPlanner.unusable`), not only when the look-ahead
forbids it some (`RoundPlanner.forbidden`). `kept_back_fit` clears the pipeline's forbidden
bits for the rest of the round and leaves only the homes due for reclaim unusable, so after
it `forbidden` is 0 while `unusable` is not. Asking `forbidden` there changed agentic-4x32 and
lab-day (bench/mutation_check.py keeps that mutant). A golden run worked out by hand.

On the same pool, the round's planner checked directly: the homes blocked for every roller
(`Loans.blocked_for_every_roller`, which lets a free fit skip a roller's own blocked bits) are
those due by the earliest roller's horizon, and `kept_back_fit` after such a skip still keeps
a home due for reclaim unusable."""

from __future__ import annotations

from rlix.policy import (
    ClusterReleased,
    ClusterRequested,
    ClusterSpec,
    PipelineKind,
    PipelineSpec,
    PolicyConfig,
    Priority,
    Tick,
    Topology,
)
from rlix.policy.look_ahead import Loans
from rlix.policy.placement import RoundPlanner
from tests.policy.drive import Driver


def at(driver: Driver, now: float) -> None:
    """Let time pass to `now` and carry out everything outstanding then."""
    driver.send(Tick(now))
    driver.apply_all()


def owner(pid: str, home: tuple[int, ...]) -> PipelineSpec:
    """A pipeline that only trains, on its home (it never rolls out here)."""
    return PipelineSpec(
        pid, PipelineKind.FULL_FINETUNE,
        {"actor_infer": ClusterSpec(1, home), "actor_train": ClusterSpec(1, home)},
        home=home,
    )


def two_owners_away() -> Driver:
    """Four GPUs: O1's home is 0-1, O2's is 2-3, and P rolls out TP 1 over all four (rank i
    on GPU i). P's loads take 2 s and its offloads 1 s (both measured: rolled out at 0 and
    20, preempted by both owners' training at 10 and 30). Both owners were away 10 s the
    first time (20-30); P ends its rollout at 32 holding nothing, O1 leaves at 40 (expected
    back at 50) and O2 at 45 (expected back at 55); their homes stay free, nobody rolling."""
    driver = Driver(Topology(1, 4), PolicyConfig(loan_payback=1.0, wake_ahead=False))
    p = PipelineSpec("P", PipelineKind.FULL_FINETUNE, {"actor_infer": ClusterSpec(1, (0, 1, 2, 3))})
    driver.add(owner("O1", (0, 1)), owner("O2", (2, 3)), p)
    driver.send(ClusterRequested(0.0, "P", "actor_infer", Priority.ROLLOUT, 100.0))
    at(driver, 2.0)
    for start in (10.0, 30.0):
        for o in ("O1", "O2"):
            driver.send(ClusterRequested(start, o, "actor_train", Priority.ACTOR_TRAIN))  # preempts P
        at(driver, start + 1.0)
        if start == 10.0:
            for o in ("O1", "O2"):
                driver.send(ClusterReleased(20.0, o, "actor_train"))  # first absence: P lent all
            at(driver, 22.0)
    driver.send(ClusterReleased(32.0, "P", "actor_infer"))
    at(driver, 32.0)
    driver.send(ClusterReleased(40.0, "O1", "actor_train"))
    at(driver, 40.0)
    driver.send(ClusterReleased(45.0, "O2", "actor_train"))
    at(driver, 45.0)
    return driver


def test_after_a_kept_back_first_bundle_the_fast_path_keeps_off_a_home_due_for_reclaim() -> None:
    """At 49.5 P asks to roll out again; its target is all four GPUs, all free. For P (load 2,
    offload 1, payback 1) a loan pays only if it lasts (1 + 1) * (2 + 1) = 6 s:

    - O1's home (GPUs 0-1), O1 back at 50: blocked (50 <= 55.5), and due for reclaim
      already (rule 2: 50 <= 49.5 + P's offload 1), so no first bundle there either;
    - O2's home (GPUs 2-3), O2 back at 55: blocked (55 <= 55.5) but not due for reclaim
      (55 > 50.5), so kept back only.

    The round: every free bundle is forbidden to P, so free_fit finds none, nor do donors or
    relocation; kept_back_fit gives P its first bundle on O2's home, GPU 2, and from then on
    P's forbidden bits are 0 while GPUs 0-1 stay unusable. P, short of its target, comes back
    to the inlined free fit, whose lowest free bundle is GPU 0: asking `unusable` it defers
    to free_fit, which gives GPU 3 and then nothing. Asking `forbidden` (0) it would take
    GPU 0 and 1, on O1's home, which rule 2 reclaims at once (expand P2, P0, P1, P3)."""
    driver = two_owners_away()
    sched = driver.sched
    p, o1, o2 = sched.pipelines["P"], sched.pipelines["O1"], sched.pipelines["O2"]
    assert (p.load_s, p.offload_s) == (2.0, 1.0)
    assert driver.held("P") == 0 and all(sched.cluster.is_free(g) for g in range(4))
    assert (o1.away_since_s + o1.last_away_s, o2.away_since_s + o2.last_away_s) == (50.0, 55.0)
    lines = driver.send(ClusterRequested(49.5, "P", "actor_infer", Priority.ROLLOUT, 100.0))
    assert sched.targets == {"P": 4}
    assert lines == ["expand P2", "expand P3"]  # O2's kept-back home only; O1's stays free


def test_a_free_fit_that_skips_the_blocked_bits_leaves_kept_back_fit_the_homes_due_for_reclaim() -> None:
    """Where every free bundle lies on homes no roller may be lent, `free_fit` answers None
    without working out the roller's own blocked bits (`Loans.blocked_for_every_roller`), so
    nothing is kept for the roller yet. `kept_back_fit` must still read those bits before it
    lets them go: its first bundle goes on O2's home, kept back only, and O1's home, due for
    reclaim, stays unusable for the rest of the round. Read after they were let go, they
    are 0 and the next free fit takes GPU 0, on O1's home. (In a round, a free fit reached
    only through reserved GPUs answers so; lab-day's decisions changed when it did.)"""
    driver = two_owners_away()
    sched = driver.sched
    p = sched.pipelines["P"]
    sched.now = 49.5  # the moment of the golden run above, as its round would see it
    p.start_rollout(100.0)
    planner = RoundPlanner(sched)
    planner.loans = Loans(sched, [p])
    home_bits = sched.cluster.bits_of(range(4))  # P's TP-1 slots are GPUs 0-3, one each
    assert planner.blocked_for_every_roller() == home_bits  # O1 back at 50, O2 at 55 <= 55.5
    assert planner.free_fit(p) is None
    first = planner.kept_back_fit(p)
    assert first is not None and first.gpus == (2,)
    again = planner.free_fit(p)  # nothing expanded: GPU 2 is still the lowest allowed
    assert again is not None and again.gpus == (2,)


def test_only_homes_due_by_the_earliest_rollers_horizon_are_blocked_for_every_roller() -> None:
    """Two rollers at 49.5: P (loads in 2 s, offloads in 1: a loan pays past 55.5) and Q, whose
    moves take 0.1 s each (past 49.9). O1 is back at 50 and O2 at 55: both homes are blocked
    for P, neither for Q, so no bundle is blocked for every roller. Q's free fit takes GPU 0
    and P's finds nothing (all four GPUs blocked for it). Counted from the latest horizon
    instead, both homes would be blocked for all and Q would be kept off free GPUs it may use."""
    driver = two_owners_away()
    driver.add(PipelineSpec("Q", PipelineKind.FULL_FINETUNE, {"actor_infer": ClusterSpec(1, (0, 1, 2, 3))}))
    sched = driver.sched
    p, q = sched.pipelines["P"], sched.pipelines["Q"]
    sched.now = 49.5
    for roller in (p, q):
        roller.start_rollout(100.0)
    q.load_s = q.offload_s = 0.1  # as the core would have measured them
    planner = RoundPlanner(sched)
    planner.loans = Loans(sched, [p, q])
    assert planner.blocked_for_every_roller() == 0
    found = planner.free_fit(q)
    assert found is not None and found.gpus == (0,)
    assert planner.free_fit(p) is None
