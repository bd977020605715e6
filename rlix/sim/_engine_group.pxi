# The group of a pipeline's rollout engines: construction, inputs, outputs, copies and the
# cutting of done trajectories (included by _engine.pyx; its event loop is _engine_loop.pxi).


cdef class RolloutGroup:
    """The rollout engines of one pipeline sharing one queue (see rlix/sim/engine.py)."""

    def __cinit__(self):
        # Blank: every pointer NULL (`copy` fills a blank one).
        self.alpha = NULL
        self.slot_of = NULL
        self.f_idx = self.f_g0 = NULL
        self.batch_left = NULL
        self.a_tid = self.a_rank = self.a_gen = self.a_g0 = NULL
        self.a_t0 = self.a_t1 = NULL
        self.a_status = NULL
        self.ev = self.wk = NULL

    def __init__(
        self,
        costs,
        tp,
        max_batch,
        kv_capacity_tokens,
        kv_watermark=0.01,
        balance=True,
        migrate_on_expand=True,
    ):
        for name, value in (
            ("tp", tp),
            ("max_batch", max_batch),
            ("kv_capacity_tokens", kv_capacity_tokens),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"RolloutGroup {name} must be a positive integer, got {value!r}")
        if not 0.0 <= kv_watermark < 1.0:
            raise ValueError(f"RolloutGroup kv_watermark must be in [0, 1), got {kv_watermark!r}")
        self.costs = costs
        self.balance = bool(balance)
        self.migrate_on_expand = bool(migrate_on_expand)
        self.tp = int(tp)
        self.max_batch = int(max_batch)
        self.kv_capacity_tokens = int(kv_capacity_tokens)
        # Admission keeps this many KV tokens free; a trajectory must fit below it on its own.
        self.admit_limit_tokens = self.kv_capacity_tokens - int(
            self.kv_capacity_tokens * kv_watermark
        )
        coefficients = [costs.decode_coefficients(b, self.tp) for b in range(self.max_batch + 1)]
        self.alpha = <double*>_grow(NULL, (self.max_batch + 1) * sizeof(double))
        for b, (a, _) in enumerate(coefficients):
            self.alpha[b] = a
        self.beta = coefficients[1][1]
        self.prefill_per_token_s = costs.prefill_compute_seconds(1, self.tp)
        self.n_sub = 0
        self._set_lists([np.zeros(1024, np.int64) for _ in range(4)])
        self.slot_of = <int32_t*>_grow(NULL, self.traj_cap * sizeof(int32_t))
        self.shared_lists = False
        self.f_cap = 64
        self.f_idx = <int64_t*>_grow(NULL, self.f_cap * sizeof(int64_t))
        self.f_g0 = <int64_t*>_grow(NULL, self.f_cap * sizeof(int64_t))
        self.f_head = self.f_len = 0
        self.qhead = 0
        self.batch_ids = []
        self.batch_left = <int64_t*>_grow(NULL, 16 * sizeof(int64_t))
        self.batch_slot = {}
        self.done = []
        self.a_cap = 0
        self.a_len = 0
        _grow_attempts(self, 1024)
        self.busy = []
        self.engines_by_rank = {}
        self.engine_at = []
        self.ev_cap = self.wk_cap = 16
        self.ev = <Event*>_grow(NULL, self.ev_cap * sizeof(Event))
        self.wk = <Event*>_grow(NULL, self.wk_cap * sizeof(Event))
        self.ev_len = self.wk_len = 0
        self.hungry = {}
        self.num_closed = 0
        self.num_open = 0
        self.version_seq = 0
        self.num_compactions = 0
        self.now = 0.0

    def __dealloc__(self):
        free(self.alpha)
        free(self.slot_of)
        free(self.f_idx)
        free(self.f_g0)
        free(self.batch_left)
        free(self.a_tid)
        free(self.a_rank)
        free(self.a_t0)
        free(self.a_t1)
        free(self.a_gen)
        free(self.a_g0)
        free(self.a_status)
        free(self.ev)
        free(self.wk)

    cdef void _set_lists(self, list arrays) except *:
        tid, prompt, resp, batch = arrays
        self.tid_a, self.prompt_a, self.resp_a, self.batch_a = tid, prompt, resp, batch
        self.tid = _int64_data(tid)
        self.prompt = _int64_data(prompt)
        self.resp = _int64_data(resp)
        self.batch = _int64_data(batch)
        self.traj_cap = len(tid)

    # -- inspection ------------------------------------------------------------------------

    @property
    def num_queued(self):
        return self.f_len + self.n_sub - self.qhead

    @property
    def num_running(self):
        return sum((<Engine>e).b for e in self.engines_by_rank.values())

    @property
    def num_indexed(self):
        """Trajectories the per-trajectory arrays hold (submitted, less the done prefix cut)."""
        return self.n_sub

    @property
    def num_remaining(self):
        """Trajectories queued or running (kept as a count: the driver asks at every stop)."""
        return self.num_open

    @property
    def engines(self):
        return sorted(self.engines_by_rank)

    @property
    def num_engines(self):
        return len(self.engines_by_rank)

    def has_engine(self, dp_rank):
        return dp_rank in self.engines_by_rank

    def engine(self, dp_rank):
        """The `Engine` of a rank (its live state, for tests)."""
        return self.engines_by_rank[dp_rank]

    def running_by_rank(self):
        """Sequences each engine runs (as of its last processed boundary)."""
        return {rank: (<Engine>e).b for rank, e in sorted(self.engines_by_rank.items())}

    # -- inputs ----------------------------------------------------------------------------

    def submit(self, traj_ids, prompt_tokens, response_tokens, batch_ids):
        """Append trajectories to the back of the queue at `now` (all four of equal length)."""
        cols = [np.asarray(c) for c in (traj_ids, prompt_tokens, response_tokens, batch_ids)]
        names = ("traj_ids", "prompt_tokens", "response_tokens", "batch_ids")
        for name, col in zip(names, cols, strict=True):
            if col.ndim != 1 or len(col) != len(cols[0]):
                raise ValueError(
                    f"submit: {name} must be 1-D with {len(cols[0])} entries, got shape {col.shape}"
                )
            if len(col) and not np.issubdtype(col.dtype, np.integer):
                raise ValueError(f"submit: {name} must be integers, got dtype {col.dtype}")
        ids, prompt, resp, batch = cols
        if not len(ids):
            return
        for name, col in (("prompt_tokens", prompt), ("response_tokens", resp)):
            bad = np.flatnonzero(col < 1)
            if len(bad):
                raise ValueError(
                    f"submit: trajectory {ids[bad[0]]} has {name}={col[bad[0]]} (must be >= 1)"
                )
        bad = np.flatnonzero(prompt.astype(np.int64) + resp > self.admit_limit_tokens)
        if len(bad):
            j = bad[0]
            raise ValueError(
                f"submit: trajectory {ids[j]} needs {prompt[j] + resp[j]} KV tokens, more than "
                f"a rank admits ({self.admit_limit_tokens} of {self.kv_capacity_tokens} less the watermark)"
            )
        if self.n_sub + len(ids) > MAX_TRAJECTORIES:
            raise ValueError(f"submit: a group holds at most {MAX_TRAJECTORIES} trajectories")
        cdef int64_t n = len(ids), first, i
        self._own_lists(n)
        was_empty = self.num_queued == 0
        self.num_open += n
        first = self.n_sub
        self.tid_a[first : first + n] = ids
        self.prompt_a[first : first + n] = prompt
        self.resp_a[first : first + n] = resp
        values, inverse, counts = np.unique(batch, return_inverse=True, return_counts=True)
        slots = []
        for value, count in zip(values.tolist(), counts.tolist(), strict=True):
            slot = self.batch_slot.get(value)
            if slot is None:
                slot = self.batch_slot[value] = len(self.batch_ids)
                self.batch_ids.append(value)
                self.batch_left = <int64_t*>_grow(
                    self.batch_left, max(16, len(self.batch_ids)) * sizeof(int64_t)
                )
                self.batch_left[slot] = 0
            self.batch_left[slot] += count
            slots.append(slot)
        self.batch_a[first : first + n] = np.asarray(slots, dtype=np.int64)[inverse.ravel()]
        for i in range(first, first + n):
            self.slot_of[i] = -1
        self.n_sub += n
        if was_empty or self.balance:  # the even share grew: a capped engine may take more
            wake_hungry(self, self.now, -1)
            flush_wakes(self)

    cdef void _own_lists(self, int64_t n) except *:
        """Before `n` trajectories are appended: cut the done prefix if worth it; give the group
        arrays of its own (a copy shares them) with room for n more."""
        cdef int64_t start
        if self.n_sub >= _min_compact and 2 * self.qhead >= self.n_sub:
            start = first_in_use(self)
            if 2 * start >= self.n_sub:
                compact(self, start)
        if not self.shared_lists and self.n_sub + n <= self.traj_cap:
            return
        cap = max(self.n_sub + n, self.traj_cap * 5 // 4 if self.n_sub + n > self.traj_cap else 0, 1024)
        grown = []
        for old in (self.tid_a, self.prompt_a, self.resp_a, self.batch_a):
            new = np.empty(cap, np.int64)
            new[: self.n_sub] = old[: self.n_sub]
            grown.append(new)
        self._set_lists(grown)
        self.shared_lists = False
        self.slot_of = <int32_t*>_grow(self.slot_of, cap * sizeof(int32_t))

    def add_engine(self, dp_rank, t_ready):
        """Start an engine for `dp_rank`; it takes work from `t_ready` on (after its weight load).
        With `migrate_on_expand`, the other engines shed what they run above the even share at
        their first boundary at or after `t_ready`."""
        if dp_rank in self.engines_by_rank:
            raise ValueError(f"add_engine: dp_rank {dp_rank} already has an engine")
        if not t_ready >= self.now:
            raise ValueError(
                f"add_engine: t_ready {t_ready!r} is before the group's time {self.now!r}"
            )
        if isinstance(dp_rank, bool) or not isinstance(dp_rank, (int, np.integer)) or dp_rank < 0:
            raise ValueError(f"add_engine: dp_rank must be an integer >= 0, got {dp_rank!r}")
        if self.migrate_on_expand:
            mark_migration(self, t_ready)
        e = Engine(dp_rank, t_ready, self.max_batch)
        self.engines_by_rank[dp_rank] = e
        while len(self.engine_at) <= dp_rank:
            self.engine_at.append(None)
        self.engine_at[dp_rank] = e
        schedule(self, e, t_ready, 0)
        flush_wakes(self)

    def close_engine(self, dp_rank):
        """Close `dp_rank`'s engine to admissions (a drain): it runs what it holds, takes no share
        of the queue, and `advance` stops ("drained") right after the event that empties it."""
        cdef Engine e = self.engines_by_rank.get(dp_rank)
        if e is None:
            raise ValueError(f"close_engine: dp_rank {dp_rank} has no engine")
        if e.closed:
            return
        e.closed = True
        self.num_closed += 1
        if e.hungry:
            e.hungry = False
            del self.hungry[dp_rank]

    def remove_engine(self, dp_rank, double t):
        """Stop `dp_rank`'s engine at `t`: sequences whose last token was done by `t` complete,
        the others go back to the queue front (admission order) with their generated prefix.
        Returns how many were re-queued."""
        cdef Engine e = self.engines_by_rank.get(dp_rank)
        cdef int64_t n, max_m, fin, idx, g0, generated
        cdef int32_t s
        cdef double alpha
        if e is None:
            raise ValueError(f"remove_engine: dp_rank {dp_rank} has no engine")
        self._check_advanced_to(t, "remove_engine")
        self.now = t
        del self.engines_by_rank[dp_rank]
        self.engine_at[dp_rank] = None
        if e.hungry:
            del self.hungry[dp_rank]
        if e.closed:
            self.num_closed -= 1
        if e.busy_since >= 0:
            self.busy.append((e.dp_rank, e.busy_since, t))
        if e.s_head < 0:
            if self.balance and self.num_queued:
                wake_hungry(self, t, -1)
                flush_wakes(self)
            return 0
        alpha = self.alpha[e.b]
        max_m = live_top(self, e) >> IDX_BITS
        n = e.n0 + boundary_at_or_before(e, t, alpha, self.beta, max_m - e.n0)
        requeued = []
        s = e.s_head
        while s >= 0:  # admission order
            idx, g0, fin = e.s_idx[s], e.s_g0[s], e.s_key[s] >> IDX_BITS
            self.slot_of[idx] = -1
            if fin <= n:
                complete(self, idx, e.dp_rank, e.s_tstart[s], time_at(e, fin - e.n0, alpha, self.beta), g0)
            else:
                generated = n - (fin - self.resp[idx] + g0)
                record(self, self.tid[idx], e.dp_rank, e.s_tstart[s], t, generated, g0, REQUEUED)
                requeued.append((idx, g0 + generated))
            s = e.s_next[s]
        for idx, g0 in reversed(requeued):
            front_push_left(self, idx, g0)
        # Requeued work, or (even share) a larger share for the engines left.
        if requeued or (self.balance and self.num_queued):
            wake_hungry(self, t, -1)
            flush_wakes(self)
        return len(requeued)

    # -- the event loop --------------------------------------------------------------------

    def advance(self, double t_limit, max_completions=None):
        """Process admissions and completions in (time, dp_rank) order up to `t_limit` inclusive.
        Stops right after the event that completes a batch ("batch_done", takes precedence),
        that brings this call's completions to `max_completions` ("completions"), or that
        empties a closed engine ("drained"); otherwise
        returns (t_limit, "limit"), or (t_limit, "idle") when nothing is running or queued.
        With t_limit = inf and nothing left to do, the time reached is the last event's."""
        if not t_limit >= self.now:
            raise ValueError(
                f"advance: t_limit {t_limit!r} is before the group's time {self.now!r}"
            )
        if max_completions is not None and max_completions < 1:
            raise ValueError(f"advance: max_completions must be >= 1, got {max_completions!r}")
        t, reason = run_events(self, t_limit, max_completions if max_completions is not None else -1)
        if reason:
            return t, STOP_NAMES[reason]
        # `run_events` returns the last event's time when it ran out of events.
        self.now = t_limit if t_limit != INFINITY else t
        idle = not self.num_queued and not any((<Engine>e).b for e in self.engines_by_rank.values())
        return self.now, "idle" if idle else "limit"

    cdef void _check_advanced_to(self, double t, str what) except *:
        while self.ev_len and not event_live(self, self.ev[0]):
            ev_pop(self)
        if not t >= self.now or (self.ev_len and self.ev[0].t < t):
            pending = self.ev[0].t if self.ev_len else None
            raise ValueError(
                f"{what}: advance the group to t={t!r} first (now {self.now!r}, next event at {pending!r})"
            )

    # -- outputs ---------------------------------------------------------------------------

    def done_batches(self):
        """Batch ids whose every trajectory completed since the last call."""
        done, self.done = self.done, []
        return done

    def drain_attempts(self):
        """Attempts finished since the last call, as tuples in `ATTEMPT_FIELDS` order."""
        columns = self.drain_attempt_columns()
        if columns is None:
            return []
        status = [STATUS_NAMES[c] for c in columns.pop("completed").tolist()]
        return list(zip(*(c.tolist() for c in columns.values()), status))

    def drain_attempt_columns(self):
        """Attempts finished since the last call as arrays, the fields of `ATTEMPT_FIELDS` with
        `completed` (bool) for `status`; None when there are none."""
        cdef int64_t n = self.a_len
        if not n:
            return None
        columns = {
            "traj_id": _array_view(self.a_tid, n, np.int64).copy(),
            "dp_rank": _array_view(self.a_rank, n, np.int64).copy(),
            "t_start": _array_view(self.a_t0, n, np.float64).copy(),
            "t_end": _array_view(self.a_t1, n, np.float64).copy(),
            "generated_tokens": _array_view(self.a_gen, n, np.int64).copy(),
            "recomputed_tokens": _array_view(self.a_g0, n, np.int64).copy(),
            # Statuses are 0 (re-queued) and 1 (completed): the bytes of a bool array.
            "completed": _array_view(self.a_status, n, np.bool_).copy(),
        }
        self.a_len = 0
        return columns

    def drain_busy(self, until=None):
        """(dp_rank, t_start, t_end) intervals with >= 1 sequence running, closed since the last
        call; with `until`, open intervals are cut there too (and go on from `until`)."""
        cdef Engine e
        busy, self.busy = self.busy, []
        if until is not None:
            for e in self.engines_by_rank.values():
                if e.busy_since >= 0 and e.busy_since < until:
                    busy.append((e.dp_rank, e.busy_since, until))
                    e.busy_since = until
        return busy

    def copy(self, RolloutGroup into=None):
        """An independent copy; per-trajectory arrays are shared until either side submits.
        With `into`, a group of the same engine configuration that nothing uses any more (a
        thrown-away look-ahead, or the state a look-ahead replaced), the copy is made in its
        memory and engine objects: no allocation for what fits (the driver copies at every
        stop)."""
        cdef RolloutGroup other
        if into is None:
            other = RolloutGroup.__new__(RolloutGroup)
        else:
            other = into
            if other is self or other.max_batch != self.max_batch or other.alpha == NULL:
                raise ValueError("copy: `into` must be another group of the same configuration")
        copy_state(self, other, into is None)
        copy_engines(self, other, into is None)
        return other
