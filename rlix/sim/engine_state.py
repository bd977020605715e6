"""One rollout engine's state and the closed-form clock of its iterations (used by `engine.py`).

An engine's state is a base boundary (time `t0`, iteration counter `n0`, batch size `b`, KV
tokens `kv`) plus `extra_s`, the prefill compute added to the first iteration after the base.
Until the next event, m iterations end at

    t0 + extra_s + m * alpha(b) + beta * (m * kv + b * m * (m - 1) / 2)

(`time_at`); `boundary_after` and `boundary_at_or_before` invert it (a quadratic in m) and then
step by whole iterations on the very same expression, so a time computed one way and compared
the other never disagrees by a rounding error.

Running sequences are int keys `finish counter << 32 | trajectory index` in a heap (int
comparisons are what make the heap cheap); `info` maps a running trajectory index to (generated
prefix at admission, admission time, key) in admission order (a dict keeps insertion order, so
the preemption victim, the latest admitted, is its last entry).
`dead` counts the keys of sequences preempted (for KV, or migrated to a joining rank) that are
still in the heap (a count: a trajectory preempted twice on one engine can leave the same key
twice, once dead, once live).
"""

from __future__ import annotations

import math

# Attempt statuses as recorded in the hot loop (an int: attempts convert to arrays in one go).
REQUEUED = 0
COMPLETED = 1
STATUS_NAMES = ("requeued", "completed")

IDX_BITS = 32
IDX_MASK = (1 << IDX_BITS) - 1


class Engine:
    """Closed-form state of one data-parallel rollout rank."""

    __slots__ = (
        "dp_rank",
        "t_ready",
        "t0",
        "n0",
        "b",
        "kv",
        "extra_s",
        "heap",
        "info",
        "dead",
        "ev_t",
        "ev_n",
        "version",
        "busy_since",
        "hungry",
        "migrate_at",
    )

    def __init__(self, dp_rank: int, t_ready: float) -> None:
        self.dp_rank = dp_rank
        self.t_ready = t_ready
        self.t0 = t_ready
        self.n0 = 0
        self.b = 0
        self.kv = 0
        self.extra_s = 0.0
        self.heap: list[int] = []
        self.info: dict[int, tuple[int, float, int]] = {}
        self.dead: dict[int, int] = {}
        self.ev_t = math.inf
        self.ev_n = 0
        self.version = -1
        self.busy_since: float | None = None
        self.hungry = False
        # A rank joined: at its first boundary at or after this time, this engine sheds what
        # it runs above the even share (inf: nothing pending).
        self.migrate_at = math.inf

    def copy(self) -> Engine:
        # Spelled out: a loop over __slots__ with getattr/setattr is several times slower, and
        # the look-ahead copies every engine of a group at every stop.
        other = Engine.__new__(Engine)
        other.dp_rank = self.dp_rank
        other.t_ready = self.t_ready
        other.t0 = self.t0
        other.n0 = self.n0
        other.b = self.b
        other.kv = self.kv
        other.extra_s = self.extra_s
        other.heap = self.heap[:]
        other.info = self.info.copy()
        other.dead = self.dead.copy() if self.dead else {}
        other.ev_t = self.ev_t
        other.ev_n = self.ev_n
        other.version = self.version
        other.busy_since = self.busy_since
        other.hungry = self.hungry
        other.migrate_at = self.migrate_at
        return other


def time_at(e: Engine, m: int, alpha: float, beta: float) -> float:
    """End of the m-th iteration after the base (m >= 1); the engine loop uses this expression."""
    return e.t0 + e.extra_s + m * alpha + beta * (m * e.kv + e.b * m * (m - 1) // 2)


def _iterations_until(e: Engine, t: float, alpha: float, beta: float) -> float:
    """Real m with time_at(m) = t (0 if t is before the first iteration can end)."""
    x = t - e.t0 - e.extra_s
    if x <= 0.0:
        return 0.0
    quadratic = beta * e.b / 2.0
    linear = alpha + beta * (e.kv - e.b / 2.0)
    # The root in the form without cancellation: 2x / (B + sqrt(B^2 + 4Ax)).
    return 2.0 * x / (linear + math.sqrt(linear * linear + 4.0 * quadratic * x))


def boundary_after(e: Engine, t: float, alpha: float, beta: float) -> int:
    """Smallest m >= 1 whose iteration ends at or after t."""
    m = max(1, math.ceil(_iterations_until(e, t, alpha, beta)))
    while m > 1 and time_at(e, m - 1, alpha, beta) >= t:
        m -= 1
    while time_at(e, m, alpha, beta) < t:
        m += 1
    return m


def boundary_at_or_before(e: Engine, t: float, alpha: float, beta: float, max_m: int) -> int:
    """Largest m in [0, max_m] whose iteration ended by t (0: none has)."""
    m = min(max_m, math.floor(_iterations_until(e, t, alpha, beta)))
    while m < max_m and time_at(e, m + 1, alpha, beta) <= t:
        m += 1
    while m > 0 and time_at(e, m, alpha, beta) > t:
        m -= 1
    return m


def drop_dead(dead: dict[int, int], key: int) -> None:
    """One dead copy of `key` has left the heap."""
    count = dead[key]
    if count == 1:
        del dead[key]
    else:
        dead[key] = count - 1
