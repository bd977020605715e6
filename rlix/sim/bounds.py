"""Floors no policy goes below: the least GPU time a pipeline's rollout can take in the
simulator's engine, and the least mean completion time of jobs taking turns on one machine.

The ceiling of `rlix-sim compare` (rlix.sim.compare) bounds a run's makespan by the work the
pool must do. Gang stages are a conserved amount of work (each takes its whole mapping for a
duration no sharing changes); rollout is not, since how trajectories are packed on ranks sets
how long a rank runs. But part of it is conserved, and this module computes that part.

The engine charges a decode iteration of a rank running `b` sequences that hold `K` tokens of
KV cache `alpha(b) + beta * K` seconds on each of the rank's `tp` GPUs, and each iteration makes
one token per sequence (`rlix.sim.costs.CostModel.decode_coefficients`). Over a whole run:

- the `alpha` terms add up to at least `N * min over b of alpha(b) / b` for `N` tokens decoded,
  `b` at most the engine's `max_batch`: no packing decodes a token more cheaply than the
  cheapest batch;
- the `beta` terms add up to `beta` times the KV cache each token read, at least its prompt and
  the tokens before it in its own response: `P * R + R * (R - 1) / 2` for a trajectory with a
  prompt of `P` tokens and a response of `R`, whichever rank it ran on.

Prefills, recomputed prefixes, weight loads and idle ranks only add to that, so the sum times
`tp` is a floor on the rollout's GPU-seconds: the trajectories a run completed cost at least
this much GPU time in any run of the same trace.

Taking turns. When jobs must hold one resource one at a time (the pool as a single machine of
its GPUs' speed; or stages that each take more than half the pool, so any two share a GPU),
`srpt_mean_flow_s` gives the least mean time from release to completion any order reaches:
serving the job with the least work left, switching when a shorter one arrives, is optimal
for the total completion time on one machine with release dates and preemption (Schrage 1968;
Smith's rule when all arrive at once), and a schedule without preemption, or one that splits
the machine between jobs, is one of the schedules it beats.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence

from rlix.sim.costs import CostModel


def rollout_gpu_s_floor(
    costs: CostModel, tp: int, max_batch: int, trajectories: Iterable[tuple[int, int]]
) -> float:
    """The least GPU-seconds decoding `trajectories` ((prompt tokens, response tokens) pairs)
    takes on ranks of `tp` GPUs running at most `max_batch` sequences each (module docstring)."""
    per_token_s = min(costs.decode_coefficients(b, tp)[0] / b for b in range(1, max_batch + 1))
    beta = costs.decode_coefficients(1, tp)[1]
    num_tokens = 0
    kv_read = 0
    for prompt, response in trajectories:
        num_tokens += response
        kv_read += prompt * response + response * (response - 1) // 2
    return tp * (num_tokens * per_token_s + beta * kv_read)


def srpt_mean_flow_s(jobs: Sequence[tuple[float, float]]) -> float:
    """The least mean of (completion - release) over schedules of `jobs`, (release s, work s)
    pairs, on one machine (module docstring): shortest remaining work first, with preemption."""
    if not jobs:
        raise ValueError("no jobs to schedule")
    for release_s, work_s in jobs:
        if not (math.isfinite(release_s) and math.isfinite(work_s) and work_s >= 0):
            raise ValueError(f"a job needs a finite release and a finite work >= 0, not {(release_s, work_s)}")
    arrivals = sorted(jobs)
    waiting: list[tuple[float, int]] = []  # (work left, index into arrivals)
    now_s = total_flow_s = 0.0
    next_job = 0
    while next_job < len(arrivals) or waiting:
        if not waiting:
            now_s = max(now_s, arrivals[next_job][0])
        while next_job < len(arrivals) and arrivals[next_job][0] <= now_s:
            heapq.heappush(waiting, (arrivals[next_job][1], next_job))
            next_job += 1
        left_s, index = heapq.heappop(waiting)
        until_s = arrivals[next_job][0] if next_job < len(arrivals) else float("inf")
        if now_s + left_s <= until_s:
            now_s += left_s
            total_flow_s += now_s - arrivals[index][0]
        else:  # an arrival comes first: it may be shorter than what is left
            heapq.heappush(waiting, (left_s - (until_s - now_s), index))
            now_s = until_s
    return total_flow_s / len(arrivals)
