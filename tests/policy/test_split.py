"""The proportional split: normalised, within one bundle of ideal, floors, caps, stickiness.

The ideal is held to `reference_ideal`, a water-filling worked out here by bisection from the
contract alone, never to the `ideal` the split returns: a split whose own ideal were wrong
(short of the budget, say) would agree with itself.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlix.policy.split import Claim, split_rollout


@st.composite
def claims(draw: st.DrawFn) -> list[Claim]:
    n = draw(st.integers(1, 8))
    return [
        Claim(
            pipeline_id=f"p{i}",
            demand=draw(st.sampled_from([0.0, 1.0, 3.0, 10.0, 250.0, 1000.0])),
            tp=draw(st.sampled_from([1, 2, 4, 8])),
            weight=draw(st.sampled_from([1.0, 0.5, 2.0])),
            num_active_gpus=draw(st.integers(0, 16)),
            max_ranks=draw(st.integers(0, 16)),
            order=i,
        )
        for i in range(n)
    ]


@settings(max_examples=400)
@given(claims(), st.integers(0, 128))
def test_targets_fit_the_budget_in_whole_bundles(cs: list[Claim], budget: int) -> None:
    split = split_rollout(cs, budget)
    assert sum(split.targets.values()) <= budget
    for c in cs:
        target = split.targets[c.pipeline_id]
        assert target % c.tp == 0
        assert target <= c.max_ranks * c.tp
        if c.demand == 0:
            assert target == 0


@settings(max_examples=400)
@given(claims(), st.integers(0, 128))
def test_one_bundle_each_while_capacity_allows(cs: list[Claim], budget: int) -> None:
    demanding = [c for c in cs if c.demand > 0 and c.max_ranks > 0]
    split = split_rollout(cs, budget)
    if sum(c.tp for c in demanding) <= budget:
        assert all(split.targets[c.pipeline_id] >= c.tp for c in demanding)


def reference_ideal(cs: list[Claim], budget: int) -> dict[str, float]:
    """The ideal GPUs of demanding claims that all fit one bundle: x_p = clamp(lam * s_p,
    low_p, cap_p), s_p = demand * tp * weight, cap_p all its ranks, low_p one bundle (or its
    floor, whole bundles, when every claim's floor fits the budget together), with one lam
    making the x_p sum to the budget, or every x_p at its cap. lam by bisection."""
    caps = {c.pipeline_id: float(c.max_ranks * c.tp) for c in cs}
    floors = {c.pipeline_id: min(float(max(c.floor, c.tp)), caps[c.pipeline_id]) for c in cs}
    lows = floors if sum(floors.values()) <= budget else {c.pipeline_id: float(c.tp) for c in cs}
    shares = {c.pipeline_id: c.demand * c.tp * c.weight for c in cs}

    def ideal(lam: float) -> dict[str, float]:
        return {pid: min(max(lam * s, lows[pid]), caps[pid]) for pid, s in shares.items()}

    if sum(caps.values()) <= budget:
        return dict(caps)
    lo, hi = 0.0, max(caps[pid] / s for pid, s in shares.items())  # at hi, everyone is at its cap
    for _ in range(200):
        mid = (lo + hi) / 2
        if sum(ideal(mid).values()) < budget:
            lo = mid
        else:
            hi = mid
    return ideal(hi)


def _held_to_the_reference(cs: list[Claim], budget: int) -> None:
    """When every demanding claim fits one bundle: the split's ideal is the reference's, each
    target is whole bundles within one bundle of it, and no GPU is left over that a claim
    short of its ideal (and below its cap) could take as a whole bundle."""
    demanding = [c for c in cs if c.demand > 0 and c.max_ranks > 0]
    if not demanding or sum(c.tp for c in demanding) > budget:
        return
    split = split_rollout(cs, budget)
    expected = reference_ideal(demanding, budget)
    tolerance = 1e-6 * max(budget, 1)
    for c in demanding:
        pid = c.pipeline_id
        assert abs(split.ideal[pid] - expected[pid]) <= tolerance, (pid, split.ideal, expected)
        assert abs(split.targets[pid] - expected[pid]) < c.tp + tolerance, (pid, split.targets, expected)
    left = budget - sum(split.targets.values())
    assert left >= 0
    for c in demanding:
        pid = c.pipeline_id
        short = split.targets[pid] < expected[pid] - tolerance and split.targets[pid] < c.max_ranks * c.tp
        assert not (short and c.tp <= left), (pid, split.targets, expected, left)


@settings(max_examples=400)
@given(claims(), st.integers(0, 128))
def test_within_one_bundle_of_the_ideal(cs: list[Claim], budget: int) -> None:
    _held_to_the_reference(cs, budget)
    demanding = [c for c in cs if c.demand > 0 and c.max_ranks > 0]
    split = split_rollout(cs, budget)
    if sum(c.tp for c in demanding) > budget:
        return
    # The ideal is proportional to demand x tp x weight among pipelines not at a bound.
    free = [c for c in demanding if c.tp < split.ideal[c.pipeline_id] < c.max_ranks * c.tp]
    for a in free:
        for b in free:
            lhs = split.ideal[a.pipeline_id] * b.demand * b.tp * b.weight
            rhs = split.ideal[b.pipeline_id] * a.demand * a.tp * a.weight
            assert abs(lhs - rhs) <= 1e-6 * max(lhs, rhs, 1.0)


def test_hand_checked_split() -> None:
    # 8 GPUs, demand 100 vs 300 at TP 1: ideal 2 and 6.
    split = split_rollout(
        [Claim("a", 100, 1, 1.0, 0, 8, 0), Claim("b", 300, 1, 1.0, 0, 8, 1)], 8
    )
    assert split.targets == {"a": 2, "b": 6}
    # Three equal pipelines on 8 GPUs: ideal 2.67 each; two get 3, one gets 2, sum 8.
    split = split_rollout([Claim(p, 10, 1, 1.0, 0, 8, i) for i, p in enumerate("abc")], 8)
    assert sorted(split.targets.values()) == [2, 3, 3] and sum(split.targets.values()) == 8
    # RLix's rounding would give 3+3+3 = 9 > 8.


def test_sticky_rounding_keeps_the_holder_of_the_extra_bundle() -> None:
    # a and b tie for the last bundle; whoever holds it keeps it, whatever the tiny change.
    def run(a_demand: float, a_holds: int, b_holds: int) -> dict[str, int]:
        return split_rollout(
            [Claim("a", a_demand, 1, 1.0, a_holds, 8, 0), Claim("b", 100, 1, 1.0, b_holds, 8, 1),
             Claim("c", 100, 1, 1.0, 2, 8, 2)], 8
        ).targets
    assert run(100.5, a_holds=2, b_holds=3)["b"] == 3  # b holds ceil: sticky beats a's bigger remainder
    assert run(99.5, a_holds=3, b_holds=2)["a"] == 3
    assert run(100.5, a_holds=2, b_holds=2)["a"] == 3  # nobody holds it: largest remainder wins


def test_more_pipelines_than_bundles_favours_holders_then_admission_order() -> None:
    cs = [Claim(f"p{i}", 10, 4, 1.0, 4 if i == 2 else 0, 2, i) for i in range(4)]
    split = split_rollout(cs, 8)
    assert split.targets == {"p0": 4, "p1": 0, "p2": 4, "p3": 0}


def test_capped_pipeline_gives_its_excess_to_others() -> None:
    split = split_rollout([Claim("small", 1000, 1, 1.0, 0, 2, 0), Claim("big", 10, 1, 1.0, 0, 16, 1)], 16)
    assert split.targets == {"small": 2, "big": 14}


@st.composite
def floored_claims(draw: st.DrawFn) -> list[Claim]:
    cs = draw(claims())
    return [
        Claim(c.pipeline_id, c.demand, c.tp, c.weight, c.num_active_gpus, c.max_ranks, c.order,
              floor=c.tp * draw(st.integers(0, 4)))
        for c in cs
    ]


@settings(max_examples=400)
@given(floored_claims(), st.integers(0, 128))
def test_floors_hold_when_they_fit_together(cs: list[Claim], budget: int) -> None:
    """Home floors: each chosen claim gets at least min(floor, its cap) when every demanding
    claim's floor (at least one bundle) fits the budget; the targets still fit the budget."""
    split = split_rollout(cs, budget)
    assert sum(split.targets.values()) <= budget
    demanding = [c for c in cs if c.demand > 0 and c.max_ranks > 0]
    wanted = {c.pipeline_id: min(max(c.floor, c.tp), c.max_ranks * c.tp) for c in demanding}
    if sum(wanted.values()) <= budget:
        for pid, floor in wanted.items():
            assert split.targets[pid] >= floor, (pid, floor, split.targets)
    _held_to_the_reference(cs, budget)


def test_the_reference_by_hand() -> None:
    # 8 GPUs, demand 100 vs 300 at TP 1: 2 and 6; capped at 2 ranks, a gives its excess away.
    assert reference_ideal([Claim("a", 100, 1, 1.0, 0, 8, 0), Claim("b", 300, 1, 1.0, 0, 8, 1)], 8) == {
        "a": pytest.approx(2.0), "b": pytest.approx(6.0)}
    assert reference_ideal([Claim("a", 1000, 1, 1.0, 0, 2, 0), Claim("b", 10, 1, 1.0, 0, 16, 1)], 16) == {
        "a": pytest.approx(2.0), "b": pytest.approx(14.0)}
    # a's floor of 4 fits beside b's bundle: 4 and 4.
    assert reference_ideal([Claim("a", 100, 1, 1.0, 0, 8, 0, floor=4), Claim("b", 300, 1, 1.0, 0, 8, 1)], 8) == {
        "a": pytest.approx(4.0), "b": pytest.approx(4.0)}


def test_a_floor_by_hand() -> None:
    # 8 GPUs, demand 100 vs 300 at TP 1; a's floor is 4 (its home): a 4, b 4 instead of 2 and 6.
    split = split_rollout([Claim("a", 100, 1, 1.0, 0, 8, 0, floor=4), Claim("b", 300, 1, 1.0, 0, 8, 1)], 8)
    assert split.targets == {"a": 4, "b": 4}
    # Floors that do not fit together (6 + 4 > 8) give way to the plain split.
    split = split_rollout([Claim("a", 100, 1, 1.0, 0, 8, 0, floor=6), Claim("b", 300, 1, 1.0, 0, 8, 1, floor=4)], 8)
    assert split.targets == {"a": 2, "b": 6}
