"""Rollout engines for the simulator, advanced in closed form between admissions and completions.

One `RolloutGroup` per pipeline holds that pipeline's FIFO queue of waiting trajectories and one
engine per active data-parallel rollout rank. In front of the ranks sits a load-balancing router,
as RL rollout systems put one in front of their data-parallel inference ranks (least-loaded
dispatch), and, like Seer's divided rollout (arXiv 2511.14617), it moves running requests to a
rank that joins:

- even share (`balance`): a rank admits only while it runs fewer than
  `cap = min(max_batch, ceil(R / E))`, R the trajectories queued or running in the group, E its
  engines (those still loading count: ranks expanded together split the work evenly);
- migration (`migrate_on_expand`): when a rank is added, every other engine, at its first
  iteration boundary at or after the new rank's ready time, sends the most recently admitted
  sequences it runs above `cap` back to the queue front, exactly like a preemption (prefix
  kept, recomputed on resume, a "requeued" attempt), so the new rank gets work at once.

With both off, each engine admits up to `max_batch` from the shared queue. An engine batches
continuously (vLLM-style):

- at each iteration boundary, finished sequences leave; a pending migration sheds; free slots
  (below `cap`) are refilled from the queue
  head while the KV cache would still hold the next iteration with a watermark to spare
  (`K + b + need + 1 <= capacity - watermark`; strict FIFO: a head that does not fit blocks
  the queue); then, while `K + b > capacity`, the most recently admitted sequence is preempted
  to the queue front, keeping its generated prefix. The watermark (1% of the cache by default)
  is vLLM's block manager's (`watermark=0.01`; Vidur models it as
  `vllm_scheduler_watermark_blocks_fraction`): without it, a saturated cache preempts almost
  every admission a few iterations later, the recompute thrash vLLM keeps it for;
- the next iteration decodes one token for every running sequence and takes
  `alpha(b) + beta * K` plus, when sequences were admitted at that boundary, the compute of
  their prefill (prompt + any resumed prefix, which counts as recomputed tokens). Prefills ride
  in the decode step, as vLLM's chunked prefill does;
- an idle engine (nothing running) starts a boundary as soon as the queue has work and it is
  ready; a running engine with a free slot looks at the queue at each of its boundaries.

Between events the batch size b is fixed and K grows by b per iteration, so m iterations from
a base (t0, K) take `extra + m*alpha(b) + beta*(m*K + b*m*(m-1)/2)`; an engine keeps a counter
of iterations and each running sequence the counter at which it finishes (a heap), so the next
event is found without stepping token by token. Events of all engines of a group are processed
in global (time, dp_rank) order, which is what makes the shared queue deterministic.

Attempt records (`drain_attempts`) are plain tuples in the order of `ATTEMPT_FIELDS`;
`drain_attempt_columns` gives them as numpy arrays, the simulator's fast path.

The group is compiled (rlix/sim/_engine.pyx, built by `pip install`): it is the simulator's hot
path, ~10^8 trajectories for a simulated day of a 1,024-GPU cluster. tests/sim/test_engine.py
holds it to a token-by-token reference engine written the plain way.
"""

from __future__ import annotations

import numpy as np

try:
    from rlix.sim._engine import RolloutGroup
except ImportError as error:  # a source tree that was never installed
    raise ImportError(
        "rlix.sim's compiled rollout engines (rlix/sim/_engine.pyx) are not built: install rlix "
        "from the repository with `pip install -e '.[sim]'` (a C compiler is needed)"
    ) from error

ATTEMPT_FIELDS = (
    "traj_id",
    "dp_rank",
    "t_start",
    "t_end",
    "generated_tokens",
    "recomputed_tokens",
    "status",
)
Attempt = tuple[int, int, float, float, int, int, str]
STOP_REASONS = ("limit", "completions", "batch_done", "drained", "idle")


def attempts_to_columns(attempts: list[Attempt]) -> dict[str, np.ndarray]:
    """Attempt tuples as one numpy array per field of `ATTEMPT_FIELDS`."""
    if not attempts:
        dtypes = (np.int64, np.int64, np.float64, np.float64, np.int64, np.int64, object)
        return {name: np.array([], dtype=d) for name, d in zip(ATTEMPT_FIELDS, dtypes, strict=True)}
    cols = list(zip(*attempts, strict=True))
    out = {name: np.array(col) for name, col in zip(ATTEMPT_FIELDS, cols, strict=True)}
    out["status"] = np.array(cols[-1], dtype=object)
    return out


__all__ = ["ATTEMPT_FIELDS", "Attempt", "RolloutGroup", "STOP_REASONS", "attempts_to_columns"]
