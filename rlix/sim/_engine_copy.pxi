# Copies of a `RolloutGroup` (included by _engine.pyx): the driver copies a pipeline's group at
# every stop to look ahead, so a copy is memcpys, into a spare group's memory when there is one.


cdef void copy_state(RolloutGroup self, RolloutGroup other, bint fresh) except *:
    """Everything of `self` but its engines into `other` (blank when `fresh`, else a group of
    the same configuration whose memory is reused)."""
    cdef int64_t first, n
    other.costs, other.balance, other.migrate_on_expand = self.costs, self.balance, self.migrate_on_expand
    other.tp, other.max_batch = self.tp, self.max_batch
    other.kv_capacity_tokens, other.admit_limit_tokens = self.kv_capacity_tokens, self.admit_limit_tokens
    other.now, other.beta, other.prefill_per_token_s = self.now, self.beta, self.prefill_per_token_s
    n = self.max_batch + 1
    other.alpha = <double*>_grow(other.alpha, n * sizeof(double))
    memcpy(other.alpha, self.alpha, n * sizeof(double))
    other._set_lists([self.tid_a, self.prompt_a, self.resp_a, self.batch_a])
    other.n_sub = self.n_sub
    self.shared_lists = other.shared_lists = True
    other.slot_of = <int32_t*>_grow(other.slot_of, self.traj_cap * sizeof(int32_t))
    memcpy(other.slot_of, self.slot_of, self.traj_cap * sizeof(int32_t))
    # The queue front unwrapped, its live part only (its capacity is its longest ever).
    other.f_cap = max(64, self.f_len)
    other.f_head, other.f_len = 0, self.f_len
    other.f_idx = <int64_t*>_grow(other.f_idx, other.f_cap * sizeof(int64_t))
    other.f_g0 = <int64_t*>_grow(other.f_g0, other.f_cap * sizeof(int64_t))
    first = self.f_cap - self.f_head if self.f_head + self.f_len > self.f_cap else self.f_len
    memcpy(other.f_idx, self.f_idx + self.f_head, first * sizeof(int64_t))
    memcpy(other.f_g0, self.f_g0 + self.f_head, first * sizeof(int64_t))
    memcpy(other.f_idx + first, self.f_idx, (self.f_len - first) * sizeof(int64_t))
    memcpy(other.f_g0 + first, self.f_g0, (self.f_len - first) * sizeof(int64_t))
    other.qhead = self.qhead
    other.batch_ids = list(self.batch_ids)
    n = max(16, len(self.batch_ids))
    other.batch_left = <int64_t*>_grow(other.batch_left, n * sizeof(int64_t))
    memcpy(other.batch_left, self.batch_left, n * sizeof(int64_t))
    other.batch_slot = dict(self.batch_slot)
    other.done = list(self.done)
    other.a_len = 0
    if self.a_len:  # usually none: the driver drains them before it copies
        if other.a_cap < self.a_len:
            _grow_attempts(other, self.a_len)
        memcpy(other.a_tid, self.a_tid, self.a_len * sizeof(int64_t))
        memcpy(other.a_rank, self.a_rank, self.a_len * sizeof(int64_t))
        memcpy(other.a_t0, self.a_t0, self.a_len * sizeof(double))
        memcpy(other.a_t1, self.a_t1, self.a_len * sizeof(double))
        memcpy(other.a_gen, self.a_gen, self.a_len * sizeof(int64_t))
        memcpy(other.a_g0, self.a_g0, self.a_len * sizeof(int64_t))
        memcpy(other.a_status, self.a_status, self.a_len * sizeof(int8_t))
    other.a_len = self.a_len
    other.busy = list(self.busy)
    other.ev_cap, other.ev_len = self.ev_cap, self.ev_len
    other.ev = <Event*>_grow(other.ev, self.ev_cap * sizeof(Event))
    memcpy(other.ev, self.ev, self.ev_len * sizeof(Event))
    if fresh:
        other.wk_cap = self.wk_cap
        other.wk = <Event*>_grow(NULL, self.wk_cap * sizeof(Event))
    other.wk_len = 0
    other.num_open = self.num_open
    other.num_closed = self.num_closed
    other.version_seq = self.version_seq
    other.num_compactions = self.num_compactions


cdef void copy_engines(RolloutGroup self, RolloutGroup other, bint fresh) except *:
    """`self`'s engines into `other`, in the engine objects `other` had for the same ranks
    (unless `fresh`)."""
    cdef Engine e, twin
    spares = {} if fresh else other.engines_by_rank
    other.engines_by_rank = {}
    other.engine_at = [None] * len(self.engine_at)
    other.hungry = {}
    for rank, e in self.engines_by_rank.items():
        twin = spares.get(rank)
        if twin is None:
            twin = e.copy()
        else:
            e.copy_into(twin)
        other.engines_by_rank[rank] = twin
        other.engine_at[rank] = twin
        if rank in self.hungry:
            other.hungry[rank] = twin
