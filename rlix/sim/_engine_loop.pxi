# The event loop of `RolloutGroup` (included by _engine.pyx): the hot path (`run_events`) and
# its rare branches; the containers it works on are in _engine_queues.pxi.

STOP_NAMES = ("", "batch_done", "completions", "drained")
DEF STOP_BATCH_DONE = 1
DEF STOP_COMPLETIONS = 2
DEF STOP_DRAINED = 3


# -- rare branches of a boundary -----------------------------------------------------------


cdef int64_t requeue_latest(RolloutGroup g, Engine e, double t, int64_t n) except -1:
    """Stop the most recently admitted sequence (the tail of the admission order) at boundary n
    and put it at the queue front with its prefix; returns the KV tokens it held. Its heap key
    stays, stale, for the completion loop to drop."""
    cdef int32_t s = e.s_tail
    cdef int64_t idx = e.s_idx[s], g0 = e.s_g0[s], key = e.s_key[s]
    cdef double t_start = e.s_tstart[s]
    cdef int64_t generated = n - ((key >> IDX_BITS) - g.resp[idx] + g0)
    e.unlink(s)
    g.slot_of[idx] = -1
    record(g, g.tid[idx], e.dp_rank, t_start, t, generated, g0, REQUEUED)
    front_push_left(g, idx, g0 + generated)
    return g.prompt[idx] + g0 + generated


cdef (int64_t, int64_t) preempt_for_kv(
    RolloutGroup g, Engine e, double t, int64_t n, int64_t b, int64_t kv
) except *:
    """Preempt the most recently admitted sequences until the next iteration fits."""
    while kv + b > g.kv_capacity_tokens:
        kv -= requeue_latest(g, e, t, n)
        b -= 1
    return b, kv


cdef inline int64_t sharing_engines(RolloutGroup g) noexcept:
    """Engines the even share divides the open trajectories among: closed (draining) ones take
    no new work, so they are not counted (at least 1)."""
    cdef int64_t n = len(g.engines_by_rank) - g.num_closed
    return n if n > 0 else 1


cdef (int64_t, int64_t, bint) migrate_out(
    RolloutGroup g, Engine e, double t, int64_t n, int64_t b, int64_t kv
) except *:
    """A rank joined: send what runs above the even share back to the queue front, latest
    admitted first, as a preemption does. Returns (b, kv, whether any left)."""
    cdef int64_t num_engines = sharing_engines(g)
    cdef int64_t cap = (g.num_open + num_engines - 1) // num_engines
    if cap > g.max_batch:
        cap = g.max_batch
    if b <= cap:
        return b, kv, False
    while b > cap:
        kv -= requeue_latest(g, e, t, n)
        b -= 1
    return b, kv, True


cdef void mark_migration(RolloutGroup g, double t_ready) except *:
    """A rank joins at `t_ready`: every engine sheds above the even share at its first
    boundary at or after then; a busy one gets an event there unless one comes first. An
    idle engine's older mark is dropped: it had nothing to shed, and when it was due is
    not tracked (idle engines have no boundaries here)."""
    cdef Engine e
    cdef double alpha
    cdef int64_t m
    for e in g.engines_by_rank.values():
        if not e.b or t_ready < e.migrate_at:
            e.migrate_at = t_ready
        if e.b:
            alpha = g.alpha[e.b]
            m = boundary_after(e, t_ready, alpha, g.beta)
            if e.n0 + m < e.ev_n:
                schedule(g, e, time_at(e, m, alpha, g.beta), e.n0 + m)
    flush_wakes(g)


cdef void wake_hungry(RolloutGroup g, double t, int64_t skip_rank) except *:
    """The queue head changed at t. Of the engines with a free slot, the one that can take
    the head first gets an event at that boundary (the new event waits in the wake buffer
    until `flush_wakes`). Waking one is enough: when it takes the head, the head changes and
    this runs again; the others could not take this head before it anyway, since an
    engine's KV only grows until its own next completion, which is an event anyway. Under
    the even share only engines below it now are candidates (the share only shrinks until
    the next submit or removal, which wake again)."""
    cdef int64_t idx, g0, need, cap, b, m, num_engines, n_wake = 0, best_rank = -1
    cdef double alpha, t_wake = 0.0, t_cand
    cdef Engine e, best = None
    if not g.hungry:
        return
    if g.f_len:
        idx, g0 = g.f_idx[g.f_head], g.f_g0[g.f_head]
    elif g.qhead < g.n_sub:
        idx, g0 = g.qhead, 0
    else:
        return
    need = g.prompt[idx] + g0
    cap = g.max_batch
    if g.balance:
        num_engines = sharing_engines(g)
        if (g.num_open + num_engines - 1) // num_engines < cap:
            cap = (g.num_open + num_engines - 1) // num_engines
    for e in g.hungry.values():
        if e.dp_rank == skip_rank:
            continue
        b = e.b
        if b >= cap:
            continue
        if not b:
            t_cand, m = t, 0
        else:
            if e.kv + 2 * b + need >= g.admit_limit_tokens:
                continue
            alpha = g.alpha[b]
            m = boundary_after(e, t, alpha, g.beta)
            if e.kv + b * (m + 1) + need >= g.admit_limit_tokens:
                continue
            t_cand = time_at(e, m, alpha, g.beta)
        if best is None or t_cand < t_wake or (t_cand == t_wake and e.dp_rank < best_rank):
            best, t_wake, n_wake, best_rank = e, t_cand, e.n0 + m, e.dp_rank
    if best is not None:
        # Unless its own next event comes first (busy: by counter; idle: by time).
        if (n_wake < best.ev_n) if best.b else (t_wake < best.ev_t):
            schedule(g, best, t_wake, n_wake)


# -- the hot path --------------------------------------------------------------------------


cdef (double, int) run_events(RolloutGroup g, double t_limit, int64_t target) except *:
    """The event loop: one boundary of one engine per turn, in (time, dp_rank) order.
    At a boundary (time t, iteration counter n): completions, admissions from the queue
    head, KV preemption, then the engine's next event."""
    cdef int64_t* prompt = g.prompt
    cdef int64_t* resp = g.resp
    cdef int64_t* batch = g.batch
    cdef int32_t* slot_of = g.slot_of
    cdef int64_t capacity = g.kv_capacity_tokens, admit_limit = g.admit_limit_tokens
    cdef int64_t max_batch = g.max_batch
    cdef double beta = g.beta, prefill_per_token_s = g.prefill_per_token_s
    cdef bint balance = g.balance
    cdef int64_t count = 0, num_submitted = g.n_sub
    # Trajectories open (queued or running) are `open0 - count` (the even share's R).
    cdef int64_t open0 = g.num_open
    cdef int64_t num_engines = sharing_engines(g)
    # Only the admissions below move the fresh-queue head: a local mirror of `qhead`.
    cdef int64_t qhead = g.qhead
    cdef bint batch_done = False, head_changed, has_work
    cdef double t = g.now, extra_s, migrate_at, te
    cdef int64_t n, b, kv, alive_from, key, idx, g0, r, slot, cap, tokens, need, m, m_kv, rank
    cdef int32_t s
    cdef Event top
    cdef Engine e
    cdef object obj
    while g.ev_len:
        top = g.ev[0]
        t = top.t
        if t > t_limit:
            g.num_open = open0 - count
            return t_limit, 0
        rank = top.rank
        obj = g.engine_at[rank] if rank < len(g.engine_at) else None
        if obj is None or (<Engine>obj).version != top.version:
            ev_pop(g)
            continue
        e = <Engine>obj
        n = e.ev_n
        b = e.b
        kv = e.kv + b * (n - e.n0)
        # Keys below `alive_from` finish at or before counter n.
        alive_from = (n + 1) << IDX_BITS
        while e.heap_len and e.heap[0] < alive_from:
            key = e.heap_pop()
            s = live_slot(g, e, key)
            if s < 0:
                continue
            idx = key & IDX_MASK
            g0 = e.s_g0[s]
            r = resp[idx]
            record(g, g.tid[idx], rank, e.s_tstart[s], t, r - g0, g0, COMPLETED)
            e.unlink(s)
            slot_of[idx] = -1
            b -= 1
            kv -= prompt[idx] + r
            count += 1
            slot = batch[idx]
            g.batch_left[slot] -= 1
            if not g.batch_left[slot]:
                batch_finished(g, slot)
                batch_done = True
        extra_s = 0.0
        head_changed = False
        migrate_at = e.migrate_at
        if migrate_at <= t:
            e.migrate_at = migrate_at = INFINITY
            g.num_open = open0 - count
            if b:
                b, kv, head_changed = migrate_out(g, e, t, n, b, kv)
        if b < max_batch and not e.closed and (g.f_len or qhead < num_submitted):
            cap = max_batch
            if balance:
                cap = (open0 - count + num_engines - 1) // num_engines
                if cap > max_batch:
                    cap = max_batch
            tokens = 0
            while b < cap:
                if g.f_len:
                    idx = g.f_idx[g.f_head]
                    g0 = g.f_g0[g.f_head]
                    need = prompt[idx] + g0
                    if kv + b + need >= admit_limit:
                        break
                    g.f_head = (g.f_head + 1) % g.f_cap
                    g.f_len -= 1
                elif qhead < num_submitted:
                    idx = qhead
                    g0 = 0
                    need = prompt[idx]
                    if kv + b + need >= admit_limit:
                        break
                    qhead += 1
                else:
                    break
                key = (n + resp[idx] - g0) << IDX_BITS | idx
                e.heap_push(key)
                slot_of[idx] = e.admit(idx, g0, t, key)
                kv += need
                b += 1
                tokens += need
            if tokens:
                g.qhead = qhead
                head_changed = True
                extra_s = <double>tokens * prefill_per_token_s
                if e.busy_since < 0:
                    e.busy_since = t
            elif b >= cap:
                # Held at the even share with work queued: a rank woken to take the head
                # may find the share shrunk since; wake the next one that can take it.
                head_changed = True
        if kv + b > capacity:
            b, kv = preempt_for_kv(g, e, t, n, b, kv)
            head_changed = True
        e.n0 = n
        e.t0 = t
        e.kv = kv
        e.b = b
        e.extra_s = extra_s
        if b:
            m = (live_top(g, e) >> IDX_BITS) - n
            m_kv = (capacity - kv) // b
            if m_kv < m:
                m = m_kv
            if migrate_at != INFINITY:  # pending: stop at the boundary where it is due
                m_kv = boundary_after(e, migrate_at, g.alpha[b], beta)
                if m_kv < m:
                    m = m_kv
            te = t + extra_s + <double>m * g.alpha[b] + beta * <double>(m * kv + b * m * (m - 1) // 2)
            e.ev_t = te
            e.ev_n = n + m
            g.version_seq += 1
            e.version = g.version_seq
            # The processed entry is still on top (wakes wait in their buffer): replace it.
            top.t = te
            top.version = e.version
            ev_sift_down(g.ev, g.ev_len, top)
        else:
            e.ev_t = INFINITY
            ev_pop(g)
            if e.busy_since >= 0:
                g.busy.append((rank, e.busy_since, t))
                e.busy_since = -1.0
        if head_changed:
            g.num_open = open0 - count
        has_work = g.f_len or qhead < num_submitted
        if b < max_batch and not e.closed:
            if not e.hungry:
                e.hungry = True
                g.hungry[rank] = e
            if head_changed and len(g.hungry) > 1 and has_work:
                wake_hungry(g, t, rank)
        elif e.hungry:
            e.hungry = False
            del g.hungry[rank]
            if head_changed and g.hungry and has_work:
                wake_hungry(g, t, rank)
        elif head_changed and g.hungry and has_work:
            wake_hungry(g, t, rank)
        if g.wk_len:
            flush_wakes(g)
        if batch_done:
            g.num_open = open0 - count
            g.now = t
            return t, STOP_BATCH_DONE
        if e.closed and not b:
            g.num_open = open0 - count
            g.now = t
            return t, STOP_DRAINED
        if count >= target > 0:
            g.num_open = open0 - count
            g.now = t
            return t, STOP_COMPLETIONS
    g.num_open = open0 - count
    return t, 0
