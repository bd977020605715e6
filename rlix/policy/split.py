"""The proportional rollout split: how many GPUs each rolling pipeline should hold.

Given a budget of B GPUs and pipelines p with rollout work R_p, TP size tp_p, job weight w_p,
current GPUs a_p and at most n_p ranks:

1. Shares s_p = R_p * tp_p * w_p (pipelines with R_p = 0 get nothing).
2. One bundle minimum while the budget allows: if the bundles of all demanding pipelines do not
   fit, pipelines already holding GPUs keep one bundle first, then the others in admission
   order, until the budget runs out.
3. Water-filling: ideal x_p = B' * s_p / sum(s) over the pipelines not yet fixed; a pipeline
   whose ideal is below one bundle is fixed at one bundle, above its n_p ranks at n_p ranks, and
   the rest is shared again, until nothing changes.
4. Rounding by largest remainder in whole bundles, so the targets never sum past B: everyone
   gets floor(x_p / tp_p) bundles, then the leftover is handed out one bundle each, first to
   pipelines that already hold at least the rounded-up amount (sticky rounding: a tiny change
   in progress does not move a rank back and forth), then by largest remainder, then id.

Every target is within one bundle of its ideal, and sum(targets) <= B.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Claim:
    """One rolling pipeline's input to the split."""

    pipeline_id: str
    demand: float
    tp: int
    weight: float
    num_active_gpus: int
    max_ranks: int
    order: int  # admission order, for the one-bundle floor when GPUs are short


@dataclass(frozen=True, slots=True)
class Split:
    targets: dict[str, int]  # GPUs
    ideal: dict[str, float]  # GPUs, before rounding


def _floor_bundles(claims: list[Claim], budget: int) -> tuple[list[Claim], int]:
    """Pick who gets the one-bundle minimum when not everybody can."""
    if sum(c.tp for c in claims) <= budget:
        return claims, budget
    chosen: list[Claim] = []
    left = budget
    for claim in sorted(claims, key=lambda c: (c.num_active_gpus == 0, c.order, c.pipeline_id)):
        if claim.tp <= left:
            chosen.append(claim)
            left -= claim.tp
    return chosen, budget


def _water_fill(claims: list[Claim], budget: int) -> dict[str, float]:
    ideal: dict[str, float] = {}
    open_claims = list(claims)
    left = float(budget)
    while open_claims:
        total = sum(c.demand * c.tp * c.weight for c in open_claims)
        fixed = False
        for claim in open_claims:
            x = left * claim.demand * claim.tp * claim.weight / total
            bound = min(max(x, float(claim.tp)), float(claim.max_ranks * claim.tp))
            if bound != x:
                ideal[claim.pipeline_id] = bound
                left -= bound
                open_claims.remove(claim)
                fixed = True
                break
        if not fixed:
            for claim in open_claims:
                ideal[claim.pipeline_id] = left * claim.demand * claim.tp * claim.weight / total
            break
    return ideal


def split_rollout(claims: list[Claim], budget: int) -> Split:
    demanding = [c for c in claims if c.demand > 0 and c.max_ranks > 0]
    targets = {c.pipeline_id: 0 for c in claims}
    chosen, budget = _floor_bundles(demanding, budget)
    if not chosen:
        return Split(targets, {c.pipeline_id: 0.0 for c in claims})
    if len(chosen) < len(demanding):
        # Not everybody fits one bundle: the chosen hold exactly one bundle each.
        for claim in chosen:
            targets[claim.pipeline_id] = claim.tp
        ideal = {c.pipeline_id: float(targets[c.pipeline_id]) for c in claims}
        return Split(targets, ideal)
    ideal = _water_fill(chosen, budget)
    left = budget
    remainders: list[tuple[bool, float, str, Claim]] = []
    for claim in chosen:
        x = ideal[claim.pipeline_id]
        bundles = min(math.floor(x / claim.tp + 1e-9), claim.max_ranks)
        targets[claim.pipeline_id] = bundles * claim.tp
        left -= bundles * claim.tp
        if bundles < claim.max_ranks and x - bundles * claim.tp > 1e-9:
            sticky = claim.num_active_gpus > bundles * claim.tp
            remainders.append((not sticky, -(x / claim.tp - bundles), claim.pipeline_id, claim))
    for _, _, pipeline_id, claim in sorted(remainders):
        if claim.tp <= left:
            targets[pipeline_id] += claim.tp
            left -= claim.tp
    for claim in claims:
        ideal.setdefault(claim.pipeline_id, 0.0)
    return Split(targets, ideal)
