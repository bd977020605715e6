"""The least GPU time a pipeline's rollout can take in the simulator's engine, whatever the policy.

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
"""

from __future__ import annotations

from collections.abc import Iterable

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
