"""The proportional rollout split: how many GPUs each rolling pipeline should hold.

Given a budget of B GPUs and pipelines p with rollout work R_p, TP size tp_p, job weight w_p,
current GPUs a_p and at most n_p ranks:

1. Shares s_p = R_p * tp_p * w_p (pipelines with R_p = 0 get nothing). They are computed
   scaled (R_p / max R and w_p / max w), so any finite non-negative work and any positive
   finite weight give finite shares: no overflow to inf, no NaN, no division by a share that
   underflowed to zero (a share too small to matter still gets its one bundle).
2. One bundle minimum while the budget allows. If the bundles of all demanding pipelines do
   not fit, pipelines that hold ranks keep theirs first (the largest shares first), then the
   pipelines waiting for a first bundle get theirs in turn: the highest weight first, then in
   admission order. Handing a minimum bundle from a holder to a newcomer costs an
   offload, a weight load and the holder's in-flight prefixes, and gains nothing the pool
   would not get anyway: the holder's rollout ends and frees it. Ranking by share alone made
   the scarce bundles change hands at every progress report on oversubscribed pools
   (blog-4on12: 81% of generated tokens recomputed, against 40% holders first). A newcomer
   waits at most until a holder's rollout ends, and shares the rest by water-filling. An
   off-policy holder's next step starts on the ranks it holds, so there the newcomer waits for
   a training gang to free GPUs instead; letting a newcomer take the bundle of a holder with a
   16th (4th) of its share measured worse all the same (blog-4on12, 8 seeds: 196.2 (197.5)
   steps/h against 198.6).
   Waiting pipelines take turns rather than the largest share first. By share, a job whose
   step has little work left (most often the one that waited longest, its batch partly done)
   is passed over by every newcomer with a full batch, for as long as newcomers keep coming;
   in turn, only those admitted before it (or weighed above it) and the holders come first.
   On lab-day (seeds 0-5), the mean JCT went from 1,173 to 1,166 s, p95 queueing from 177 to
   163 s and p95 slowdown from 1.68 to 1.64. The bundled studies did not change (blog-4on12
   198.8 steps/h at 703 s against 702 s; the others to the second).
3. Water-filling over the pipelines that got a bundle: ideal x_p = clamp(lam * s_p, f_p,
   n_p bundles), with one common lam such that the ideals sum to B (or everyone is at n_p
   bundles). The floor f_p is one bundle, or the claim's own `floor` (whole bundles) when the
   floors of all chosen claims fit B together (the rlix policy's home floor: a pipeline gets
   at least the GPUs of its home that it can use, so sharing never leaves it with less than
   it would have alone on its home).
4. Rounding by largest remainder in whole bundles, so the targets never sum past B: everyone
   gets floor(x_p / tp_p) bundles, then the leftover is handed out one bundle each, first to
   pipelines that already hold at least the rounded-up amount (sticky rounding: a tiny change
   in progress does not move a rank back and forth), then by largest remainder, then id.

Every target is within one bundle of its ideal, and sum(targets) <= B.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple


class Claim(NamedTuple):
    """One rolling pipeline's input to the split. A tuple, so that a round's claims compare
    with the last round's at C speed (`rlix.policy.rollout.compute_split` reuses the split
    when they and the budget are the same: the split is a function of them alone)."""

    pipeline_id: str
    demand: float
    tp: int
    weight: float
    num_active_gpus: int
    max_ranks: int
    order: int  # admission order, for the one-bundle floor when GPUs are short
    floor: int = 0  # GPUs, whole bundles: a floor above one bundle, if all floors fit


@dataclass(frozen=True, slots=True)
class Split:
    targets: dict[str, int]  # GPUs
    ideal: dict[str, float]  # GPUs, before rounding


#: Scaled shares are at least this: a share that underflowed to 0 or to a subnormal must not
#: make a breakpoint (one bundle / share) overflow. It only matters to shares that are
#: negligible next to the largest one, which get their one bundle and nothing more.
MIN_SHARE = 1e-200


def _shares(claims: list[Claim]) -> dict[str, float]:
    """s_p proportional to demand * tp * weight, scaled into [MIN_SHARE, max tp]."""
    max_demand = max([c.demand for c in claims])
    max_weight = max([c.weight for c in claims])
    shares = {}
    for c in claims:
        share = (c.demand / max_demand) * c.tp * (c.weight / max_weight)
        shares[c.pipeline_id] = MIN_SHARE if MIN_SHARE > share else share  # max(share, MIN_SHARE)
    return shares


def _floor_bundles(claims: list[Claim], shares: dict[str, float], budget: int) -> list[Claim]:
    """Pick who gets the one-bundle minimum when not everybody can: holders first, the largest
    share first among them; then those waiting for a first bundle, the highest weight first,
    then in admission order (module docstring, 2)."""
    if sum(c.tp for c in claims) <= budget:
        return claims
    chosen: list[Claim] = []
    left = budget
    holders = sorted((c for c in claims if c.num_active_gpus), key=lambda c: (-shares[c.pipeline_id], c.order, c.pipeline_id))
    waiting = sorted((c for c in claims if not c.num_active_gpus), key=lambda c: (-c.weight, c.order, c.pipeline_id))
    for claim in holders + waiting:
        if claim.tp <= left:
            chosen.append(claim)
            left -= claim.tp
    return chosen


def _water_fill(claims: list[Claim], all_shares: dict[str, float], budget: int) -> dict[str, float]:
    """Ideal GPUs x_p = clamp(lam * s_p, floor, all ranks), with lam chosen so that the x_p
    sum to the budget (or everyone is at its cap). f(lam) is piecewise linear and
    non-decreasing, so one sweep over its sorted breakpoints finds the right piece."""
    shares = [all_shares[c.pipeline_id] for c in claims]
    highs = [float(c.max_ranks * c.tp) for c in claims]
    lows = [float(c.tp) for c in claims]
    floors = [min(float(max(c.floor, c.tp)), high) for c, high in zip(claims, highs, strict=True)]
    if sum(floors) <= budget:
        lows = floors
    if sum(highs) <= budget:
        return {c.pipeline_id: h for c, h in zip(claims, highs, strict=True)}

    # Sweep the breakpoints left to right, tracking f and its slope, to find the piece where f
    # crosses the budget (one sort; a binary search would re-evaluate f, O(n), per probe).
    slope_change: dict[float, float] = {}
    for s, lo, hi in zip(shares, lows, highs, strict=True):
        at = lo / s
        slope_change[at] = slope_change.get(at, 0.0) + s
        at = hi / s
        slope_change[at] = slope_change.get(at, 0.0) - s
    points = sorted(slope_change)
    filled, slope = sum(lows), 0.0  # f(points[0]) = sum(lows) <= budget < f(points[-1])
    lo_index = 0
    last_index = len(points) - 2
    while lo_index < last_index:
        point = points[lo_index]
        slope += slope_change[point]
        after = filled + slope * (points[lo_index + 1] - point)
        if after > budget:
            break
        filled = after
        lo_index += 1
    hi_index = lo_index + 1
    probe = (points[lo_index] + points[hi_index]) / 2
    fixed, slope = 0.0, 0.0
    for s, lo, hi in zip(shares, lows, highs, strict=True):
        value = probe * s
        if value <= lo:
            fixed += lo
        elif value >= hi:
            fixed += hi
        else:
            slope += s
    lam = (budget - fixed) / slope if slope > 0 else points[lo_index]
    ideal = {}
    for c, s, lo, hi in zip(claims, shares, lows, highs, strict=True):
        value = lam * s
        if lo > value:  # min(max(value, lo), hi), spelled out: this runs for every roller
            value = lo
        if hi < value:
            value = hi
        ideal[c.pipeline_id] = value
    return ideal


def split_rollout(claims: list[Claim], budget: int) -> Split:
    demanding = [c for c in claims if c.demand > 0 and c.max_ranks > 0]
    targets = {c.pipeline_id: 0 for c in claims}
    if not demanding:
        return Split(targets, {c.pipeline_id: 0.0 for c in claims})
    shares = _shares(demanding)
    chosen = _floor_bundles(demanding, shares, budget)
    if not chosen:
        return Split(targets, {c.pipeline_id: 0.0 for c in claims})
    ideal = _water_fill(chosen, shares, budget)
    left = budget
    remainders: list[tuple[bool, float, str, Claim]] = []
    for claim in chosen:
        x = ideal[claim.pipeline_id]
        tp = claim.tp
        bundles = math.floor(x / tp + 1e-9)
        if claim.max_ranks < bundles:
            bundles = claim.max_ranks
        gpus = bundles * tp
        targets[claim.pipeline_id] = gpus
        left -= gpus
        if bundles < claim.max_ranks and x - gpus > 1e-9:
            sticky = claim.num_active_gpus > gpus
            remainders.append((not sticky, -(x / tp - bundles), claim.pipeline_id, claim))
    for _, _, pipeline_id, claim in sorted(remainders):
        if claim.tp <= left:
            targets[pipeline_id] += claim.tp
            left -= claim.tp
    for claim in claims:
        ideal.setdefault(claim.pipeline_id, 0.0)
    return Split(targets, ideal)
