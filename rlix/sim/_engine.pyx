# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The compiled rollout engines: one `RolloutGroup` per pipeline (the model is in engine.py).

Compiled because it is the simulator's hot path: a simulated day of a 1,024-GPU cluster runs
~10^8 trajectories through it, one event per iteration boundary that completes or admits a
sequence. The state is C arrays, so an event costs a few heap operations and no Python objects,
and a look-ahead copy (rollout.py copies the group at every stop) is a handful of memcpys.

Layout:
- per trajectory (internal index = submission order, less the done prefix compaction cuts):
  id, prompt, response and batch slot in int64 arrays shared by copies until one submits, and
  `slot_of`, the slot it runs in on its engine (-1: not running);
- the queue: re-queued (index, generated prefix) pairs in a ring buffer in front of the fresh
  submissions from `qhead` on;
- per engine (`Engine`, _engine.pxd): the closed-form base (t0, n0, b, kv, extra_s), a heap of
  `finish << 32 | idx` keys and the running sequences by slot, linked in admission order (the
  preemption victim is the tail). A preempted sequence's key stays in the heap; a key is live
  while its trajectory runs in the slot `slot_of` names under that very key, so a stale key is
  dropped when it surfaces (no set of dead keys to keep);
- events: a heap of (t, dp_rank, version); an entry whose version is not its engine's current
  one is stale. Versions come from one counter per group, so an engine re-added at a rank
  never takes an old entry of that rank for its own.

Every float is computed by the same expression, in the same order, as the pure-Python engine
this replaces (tests/sim/test_engine.py holds both to the token-by-token reference engine).
"""

cimport cython
from cython cimport view
from libc.math cimport INFINITY, ceil, floor, sqrt
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy, memmove

import numpy as np

# Attempt statuses as recorded (an int: attempts convert to arrays in one go).
REQUEUED = 0
COMPLETED = 1
DEF STATUS_REQUEUED = 0
STATUS_NAMES = ("requeued", "completed")
#: Columns of a pipeline's attempt rows (`AttemptRows`) and their dtypes (32-bit: a simulated
#: day of a large cluster has ~10^8 rows).
ROW_DTYPES = {
    "trajectory_id": np.int32,
    "dp_rank": np.int32,
    "t_start": np.float64,
    "t_end": np.float64,
    "recomputed_tokens": np.int32,
    "preemptions": np.int32,
    "weight_version": np.int32,
    "status": np.int8,
}
DEF IDX_BITS = 32
DEF SLOT_BYTES = 40  # per slot: idx, g0, t_start, key (8 bytes each), prev, next (4)
cdef int64_t IDX_MASK = (<int64_t>1 << IDX_BITS) - 1
MAX_TRAJECTORIES = (1 << IDX_BITS) - 1

#: Per-trajectory arrays shorter than this are never cut (the cut is a pass over what runs and
#: is queued). Tests lower it (`set_min_compact`) to cut at every submit that can.
cdef int64_t _min_compact = 1 << 14


def set_min_compact(int64_t value):
    """Set the shortest per-trajectory arrays a submit may cut; returns the old value."""
    global _min_compact
    old = _min_compact
    _min_compact = value
    return old


# -- C memory and numpy ------------------------------------------------------------------------


cdef void* _grow(void* ptr, int64_t size) except NULL:
    cdef void* out = realloc(ptr, size if size > 0 else 1)
    if out == NULL:
        raise MemoryError()
    return out


cdef int64_t* _int64_data(object array):
    """The data of a contiguous int64 numpy array."""
    cdef int64_t[::1] view = array
    return &view[0]


cdef object _array_view(void* data, int64_t n, object dtype):
    """A numpy array over data[:n] (no copy; valid while the memory is)."""
    itemsize = np.dtype(dtype).itemsize
    cdef unsigned char[::1] raw = <unsigned char[:n * itemsize]><unsigned char*>data
    return np.asarray(raw).view(dtype)


cdef object _owned_array(void* data, int64_t n, object dtype):
    """A numpy array of data[:n] that frees `data` (malloc'd) when it goes: no copy."""
    itemsize = np.dtype(dtype).itemsize
    if n == 0:
        free(data)
        return np.zeros(0, dtype=dtype)
    data = _grow(data, n * itemsize)  # give the unused tail back
    cdef view.array owner = view.array(
        shape=(n * itemsize,), itemsize=1, format="B", mode="c", allocate_buffer=False
    )
    owner.data = <char*>data
    owner.callback_free_data = free
    return np.asarray(owner).view(dtype)


# -- one engine --------------------------------------------------------------------------------


@cython.freelist(256)
cdef class Engine:
    """Closed-form state of one data-parallel rollout rank (fields in _engine.pxd)."""

    def __cinit__(self, int64_t dp_rank, double t_ready, int64_t num_slots):
        cdef int64_t s
        if num_slots < 0:  # blank, for `copy` to fill
            self.heap = NULL
            self.slots = NULL
            return
        self.dp_rank = dp_rank
        self.t_ready = t_ready
        self.t0 = t_ready
        self.n0 = 0
        self.b = 0
        self.kv = 0
        self.extra_s = 0.0
        self.ev_t = INFINITY
        self.ev_n = 0
        self.version = -1
        self.busy_since = -1.0
        self.hungry = False
        self.closed = False
        # A rank joined: at its first boundary at or after this time, this engine sheds what
        # it runs above the even share (inf: nothing pending).
        self.migrate_at = INFINITY
        self.heap_cap = 16
        self.heap_len = 0
        self.heap = <int64_t*>_grow(NULL, 16 * sizeof(int64_t))
        self.num_slots = num_slots
        self.slots = _grow(NULL, num_slots * SLOT_BYTES)
        self._point_slots()
        self.s_head = self.s_tail = -1
        for s in range(num_slots):  # the free list: each slot's `next` is the next free one
            self.s_idx[s] = -1
            self.s_next[s] = <int32_t>(s + 1 if s + 1 < num_slots else -1)
        self.s_free = 0 if num_slots else -1

    def __dealloc__(self):
        free(self.heap)
        free(self.slots)

    cdef void _point_slots(self) noexcept:
        # One block per engine for every per-slot array: a copy is one memcpy.
        cdef char* p = <char*>self.slots
        cdef int64_t n = self.num_slots
        self.s_idx = <int64_t*>p
        self.s_g0 = <int64_t*>(p + 8 * n)
        self.s_tstart = <double*>(p + 16 * n)
        self.s_key = <int64_t*>(p + 24 * n)
        self.s_prev = <int32_t*>(p + 32 * n)
        self.s_next = <int32_t*>(p + 36 * n)

    cdef Engine copy(self):
        cdef Engine other = Engine.__new__(Engine, self.dp_rank, self.t_ready, -1)
        self.copy_into(other)
        return other

    cdef void copy_into(self, Engine other) except *:
        """Make `other` (blank, or an engine nothing uses any more) an independent copy of this
        one, reusing its memory where it fits."""
        other.dp_rank, other.t_ready = self.dp_rank, self.t_ready
        other.t0, other.n0, other.b, other.kv = self.t0, self.n0, self.b, self.kv
        other.extra_s, other.ev_t, other.ev_n = self.extra_s, self.ev_t, self.ev_n
        other.version, other.busy_since, other.hungry = self.version, self.busy_since, self.hungry
        other.migrate_at = self.migrate_at
        other.closed = self.closed
        if other.heap == NULL or other.heap_cap < self.heap_len:
            other.heap_cap = self.heap_len if self.heap_len else 1
            other.heap = <int64_t*>_grow(other.heap, other.heap_cap * sizeof(int64_t))
        other.heap_len = self.heap_len
        memcpy(other.heap, self.heap, self.heap_len * sizeof(int64_t))
        if other.slots == NULL or other.num_slots != self.num_slots:
            other.slots = _grow(other.slots, self.num_slots * SLOT_BYTES)
            other.num_slots = self.num_slots
        memcpy(other.slots, self.slots, self.num_slots * SLOT_BYTES)
        other._point_slots()
        other.s_head, other.s_tail, other.s_free = self.s_head, self.s_tail, self.s_free

    @property
    def running(self):
        """(trajectory index, generated prefix at admission, admission time, heap key) of each
        running sequence, in admission order."""
        out = []
        cdef int32_t s = self.s_head
        while s >= 0:
            out.append((self.s_idx[s], self.s_g0[s], self.s_tstart[s], self.s_key[s]))
            s = self.s_next[s]
        return out

    def state(self):
        """Every scalar of the state and the heap's keys (for tests comparing copies)."""
        return (
            self.dp_rank, self.t_ready, self.t0, self.n0, self.b, self.kv, self.extra_s,
            self.ev_t, self.ev_n, self.version, self.busy_since, self.hungry, self.migrate_at,
            sorted([self.heap[i] for i in range(self.heap_len)]), self.running,
        )

    cdef void heap_push(self, int64_t key) noexcept:
        # Sift up (heapq's order; keys are unique up to stale duplicates of equal value).
        cdef int64_t* h
        cdef int64_t pos, parent
        if self.heap_len == self.heap_cap:
            self.heap_cap *= 2
            self.heap = <int64_t*>realloc(self.heap, self.heap_cap * sizeof(int64_t))
        h = self.heap
        pos = self.heap_len
        self.heap_len += 1
        while pos > 0:
            parent = (pos - 1) >> 1
            if h[parent] <= key:
                break
            h[pos] = h[parent]
            pos = parent
        h[pos] = key

    cdef int64_t heap_pop(self) noexcept:
        cdef int64_t* h = self.heap
        cdef int64_t top = h[0]
        cdef int64_t last, n, pos, child
        self.heap_len -= 1
        n = self.heap_len
        if n == 0:
            return top
        last = h[n]
        pos = 0
        while True:
            child = 2 * pos + 1
            if child >= n:
                break
            if child + 1 < n and h[child + 1] < h[child]:
                child += 1
            if last <= h[child]:
                break
            h[pos] = h[child]
            pos = child
        h[pos] = last
        return top

    cdef int32_t admit(self, int64_t idx, int64_t g0, double t, int64_t key) noexcept:
        """Put a sequence in a free slot at the tail of the admission order; returns the slot."""
        cdef int32_t s = self.s_free
        self.s_free = self.s_next[s]
        self.s_idx[s] = idx
        self.s_g0[s] = g0
        self.s_tstart[s] = t
        self.s_key[s] = key
        self.s_prev[s] = self.s_tail
        self.s_next[s] = -1
        if self.s_tail >= 0:
            self.s_next[self.s_tail] = s
        else:
            self.s_head = s
        self.s_tail = s
        return s

    cdef void unlink(self, int32_t s) noexcept:
        cdef int32_t p = self.s_prev[s], q = self.s_next[s]
        if p >= 0:
            self.s_next[p] = q
        else:
            self.s_head = q
        if q >= 0:
            self.s_prev[q] = p
        else:
            self.s_tail = p
        self.s_idx[s] = -1  # a stale heap key naming this slot must not look live
        self.s_next[s] = self.s_free
        self.s_free = s


# -- the closed-form clock ---------------------------------------------------------------------


cdef inline double time_at(Engine e, int64_t m, double alpha, double beta) noexcept:
    """End of the m-th iteration after the base (m >= 1); the event loop uses this expression."""
    return e.t0 + e.extra_s + <double>m * alpha + beta * <double>(m * e.kv + e.b * m * (m - 1) // 2)


cdef double _iterations_until(Engine e, double t, double alpha, double beta) noexcept:
    """Real m with time_at(m) = t (0 if t is before the first iteration can end)."""
    cdef double x = t - e.t0 - e.extra_s
    cdef double quadratic, linear
    if x <= 0.0:
        return 0.0
    quadratic = beta * <double>e.b / 2.0
    linear = alpha + beta * (<double>e.kv - <double>e.b / 2.0)
    # The root in the form without cancellation: 2x / (B + sqrt(B^2 + 4Ax)).
    return 2.0 * x / (linear + sqrt(linear * linear + 4.0 * quadratic * x))


cdef int64_t boundary_after(Engine e, double t, double alpha, double beta) noexcept:
    """Smallest m >= 1 whose iteration ends at or after t."""
    cdef int64_t m = <int64_t>ceil(_iterations_until(e, t, alpha, beta))
    if m < 1:
        m = 1
    while m > 1 and time_at(e, m - 1, alpha, beta) >= t:
        m -= 1
    while time_at(e, m, alpha, beta) < t:
        m += 1
    return m


cdef int64_t boundary_at_or_before(
    Engine e, double t, double alpha, double beta, int64_t max_m
) noexcept:
    """Largest m in [0, max_m] whose iteration ended by t (0: none has)."""
    cdef int64_t m = <int64_t>floor(_iterations_until(e, t, alpha, beta))
    if m > max_m:
        m = max_m
    while m < max_m and time_at(e, m + 1, alpha, beta) <= t:
        m += 1
    while m > 0 and time_at(e, m, alpha, beta) > t:
        m -= 1
    return m


include "_engine_queues.pxi"
include "_engine_loop.pxi"
include "_engine_compact.pxi"
include "_engine_copy.pxi"
include "_engine_group.pxi"
include "_engine_rows.pxi"
