# Keeping a group's per-trajectory arrays as short as its open trajectories (included by
# _engine.pyx). A group indexes its trajectories by submission order; a pipeline submits a batch
# per step for a whole run, so without care these arrays grow by the run's every trajectory (a
# simulated day of a large cluster is ~10^8). Before a submit, when every index below some
# `start` is done with (neither queued nor running, nor named by a stale heap key), and that is
# at least half the arrays, they are cut to [start:] and every index held elsewhere moves down.


cdef int64_t first_in_use(RolloutGroup g) except -1:
    """The lowest internal index still held: queued, running, or named by a stale heap key
    (shifting those must not borrow)."""
    cdef int64_t start = g.qhead, k, i
    cdef Engine e
    for k in range(g.f_len):
        i = g.f_idx[(g.f_head + k) % g.f_cap]
        if i < start:
            start = i
    for e in g.engines_by_rank.values():
        for k in range(e.heap_len):
            i = e.heap[k] & IDX_MASK
            if i < start:
                start = i
    return start


cdef void compact(RolloutGroup g, int64_t start) except *:
    """Cut every index below `start` (all done with): arrays from `start` on, every index held
    elsewhere down by `start`. Keys are `finish << 32 | idx` with idx >= start, so `key - start`
    only changes the low bits: heap order, and every comparison the event loop makes, hold."""
    cdef int64_t k, n = g.n_sub - start
    cdef Engine e
    # New arrays (copies): a group sharing the old ones keeps them as they were.
    g._set_lists([np.concatenate([a[start : g.n_sub], np.empty(max(1024, n) - n, np.int64)])
                   for a in (g.tid_a, g.prompt_a, g.resp_a, g.batch_a)])
    g.shared_lists = False
    memmove(g.slot_of, g.slot_of + start, n * sizeof(int32_t))
    g.slot_of = <int32_t*>_grow(g.slot_of, g.traj_cap * sizeof(int32_t))
    g.n_sub = n
    g.qhead -= start
    for k in range(g.f_len):
        g.f_idx[(g.f_head + k) % g.f_cap] -= start
    for e in g.engines_by_rank.values():
        for k in range(e.heap_len):
            e.heap[k] -= start
        for k in range(e.num_slots):
            if e.s_idx[k] >= 0:
                e.s_idx[k] -= start
                e.s_key[k] -= start
    g.num_compactions += 1
