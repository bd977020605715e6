# The small containers of the engines' event loop (included by _engine.pyx, before the loop):
# the event heap and its wake buffer, the queue front, the attempt records, running keys.


# -- the event heap: (t, dp_rank, version), ordered as tuples are ----------------------------


cdef inline bint ev_less(Event a, Event b) noexcept:
    if a.t != b.t:
        return a.t < b.t
    if a.rank != b.rank:
        return a.rank < b.rank
    return a.version < b.version


cdef void ev_sift_down(Event* h, int64_t n, Event item) noexcept:
    """Place `item` at the root of a heap of n entries (the root's old entry is gone)."""
    cdef int64_t pos = 0, child
    while True:
        child = 2 * pos + 1
        if child >= n:
            break
        if child + 1 < n and ev_less(h[child + 1], h[child]):
            child += 1
        if not ev_less(h[child], item):
            break
        h[pos] = h[child]
        pos = child
    h[pos] = item


cdef void ev_push(RolloutGroup g, Event item) except *:
    cdef int64_t pos, parent
    if g.ev_len == g.ev_cap:
        g.ev_cap *= 2
        g.ev = <Event*>_grow(g.ev, g.ev_cap * sizeof(Event))
    pos = g.ev_len
    g.ev_len += 1
    while pos > 0:
        parent = (pos - 1) >> 1
        if not ev_less(item, g.ev[parent]):
            break
        g.ev[pos] = g.ev[parent]
        pos = parent
    g.ev[pos] = item


cdef inline void ev_pop(RolloutGroup g) noexcept:
    g.ev_len -= 1
    if g.ev_len:
        ev_sift_down(g.ev, g.ev_len, g.ev[g.ev_len])


cdef inline bint event_live(RolloutGroup g, Event item) noexcept:
    cdef object e = g.engine_at[item.rank] if item.rank < len(g.engine_at) else None
    return e is not None and (<Engine>e).version == item.version


cdef void schedule(RolloutGroup g, Engine e, double t, int64_t n) except *:
    """Give `e` its next event at (t, n); it waits in the wake buffer until `flush_wakes`."""
    g.version_seq += 1
    e.version = g.version_seq
    e.ev_t = t
    e.ev_n = n
    if g.wk_len == g.wk_cap:
        g.wk_cap *= 2
        g.wk = <Event*>_grow(g.wk, g.wk_cap * sizeof(Event))
    g.wk[g.wk_len].t = t
    g.wk[g.wk_len].rank = e.dp_rank
    g.wk[g.wk_len].version = e.version
    g.wk_len += 1


cdef void flush_wakes(RolloutGroup g) except *:
    cdef int64_t k
    for k in range(g.wk_len):
        ev_push(g, g.wk[k])
    g.wk_len = 0


# -- the queue front, records, running keys ------------------------------------------------


cdef void front_push_left(RolloutGroup g, int64_t idx, int64_t g0) except *:
    cdef int64_t k, cap
    cdef int64_t* new_idx
    cdef int64_t* new_g0
    if g.f_len == g.f_cap:
        cap = 2 * g.f_cap
        new_idx = <int64_t*>_grow(NULL, cap * sizeof(int64_t))
        new_g0 = <int64_t*>_grow(NULL, cap * sizeof(int64_t))
        for k in range(g.f_len):
            new_idx[k] = g.f_idx[(g.f_head + k) % g.f_cap]
            new_g0[k] = g.f_g0[(g.f_head + k) % g.f_cap]
        free(g.f_idx)
        free(g.f_g0)
        g.f_idx, g.f_g0, g.f_cap, g.f_head = new_idx, new_g0, cap, 0
    g.f_head = (g.f_head - 1 + g.f_cap) % g.f_cap
    g.f_idx[g.f_head] = idx
    g.f_g0[g.f_head] = g0
    g.f_len += 1


cdef void _grow_attempts(RolloutGroup g, int64_t cap) except *:
    g.a_tid = <int64_t*>_grow(g.a_tid, cap * sizeof(int64_t))
    g.a_rank = <int64_t*>_grow(g.a_rank, cap * sizeof(int64_t))
    g.a_t0 = <double*>_grow(g.a_t0, cap * sizeof(double))
    g.a_t1 = <double*>_grow(g.a_t1, cap * sizeof(double))
    g.a_gen = <int64_t*>_grow(g.a_gen, cap * sizeof(int64_t))
    g.a_g0 = <int64_t*>_grow(g.a_g0, cap * sizeof(int64_t))
    g.a_status = <int8_t*>_grow(g.a_status, cap * sizeof(int8_t))
    g.a_cap = cap


cdef inline void record(
    RolloutGroup g, int64_t tid, int64_t rank, double t0, double t1, int64_t gen, int64_t g0,
    int8_t status
) except *:
    cdef int64_t k = g.a_len
    if k == g.a_cap:
        _grow_attempts(g, max(1024, 2 * g.a_cap))
    g.a_tid[k] = tid
    g.a_rank[k] = rank
    g.a_t0[k] = t0
    g.a_t1[k] = t1
    g.a_gen[k] = gen
    g.a_g0[k] = g0
    g.a_status[k] = status
    g.a_len = k + 1


cdef inline int32_t live_slot(RolloutGroup g, Engine e, int64_t key) noexcept:
    """The slot `key` runs in on `e`, or -1 for a stale key (its sequence was preempted)."""
    cdef int64_t idx = key & IDX_MASK
    cdef int32_t s = g.slot_of[idx]
    if s >= 0 and e.s_idx[s] == idx and e.s_key[s] == key:
        return s
    return -1


cdef int64_t live_top(RolloutGroup g, Engine e) noexcept:
    """Drop stale keys off the top of a running engine's heap; returns the live top."""
    while live_slot(g, e, e.heap[0]) < 0:
        e.heap_pop()
    return e.heap[0]


cdef void complete(
    RolloutGroup g, int64_t idx, int64_t rank, double t_start, double t_end, int64_t g0
) except *:
    g.num_open -= 1
    record(g, g.tid[idx], rank, t_start, t_end, g.resp[idx] - g0, g0, COMPLETED)
    cdef int64_t slot = g.batch[idx]
    g.batch_left[slot] -= 1
    if not g.batch_left[slot]:
        batch_finished(g, slot)


cdef void batch_finished(RolloutGroup g, int64_t slot) except *:
    batch_id = g.batch_ids[slot]
    if g.batch_slot.get(batch_id) == slot:
        del g.batch_slot[batch_id]
    g.done.append(batch_id)
