# A pipeline's attempt rows (included by _engine.pyx): growing column arrays that
# rlix.sim.rollout fills from its group's finished attempts at every stop, in C (at ~10^6 stops
# a simulated day, a handful of numpy calls per stop cost more than the engines' own work).


cdef class AttemptRows:
    """The attempt rows of one pipeline so far, a numpy array per column (`columns`).

    `absorb` takes a group's finished attempts as rows: re-queued attempts first, then
    completed ones, each in the order the group finished them. A re-queued row counts the
    trajectory's preemptions before the batch of attempts it came in, a completed one all of
    them; the weight version is the number of versions its adapter had published by the
    attempt's start."""

    cdef public int64_t size
    cdef int64_t cap
    cdef object arrays  # dict: column name -> array of capacity `cap`
    cdef int32_t[::1] tid
    cdef int32_t[::1] rank
    cdef double[::1] t0
    cdef double[::1] t1
    cdef int32_t[::1] recomputed
    cdef int32_t[::1] preemptions
    cdef int32_t[::1] version
    cdef int8_t[::1] status

    def __init__(self):
        self.size = 0
        self.cap = 0
        self._reserve(1024)

    cdef void _reserve(self, int64_t n) except *:
        """Room for n more rows (growth by a quarter: a day's run has ~10^8 rows)."""
        if self.size + n <= self.cap:
            return
        cap = max(self.cap * 5 // 4, self.size + n)
        grown = {}
        for name, dtype in ROW_DTYPES.items():
            array = np.zeros(cap, dtype=dtype)
            if self.cap:
                array[: self.size] = self.arrays[name][: self.size]
            grown[name] = array
        self.arrays, self.cap = grown, cap
        self.tid, self.rank = grown["trajectory_id"], grown["dp_rank"]
        self.t0, self.t1 = grown["t_start"], grown["t_end"]
        self.recomputed, self.preemptions = grown["recomputed_tokens"], grown["preemptions"]
        self.version, self.status = grown["weight_version"], grown["status"]

    def columns(self):
        """Every column's rows so far (views)."""
        return {name: array[: self.size] for name, array in self.arrays.items()}

    def append(self, **columns):
        """Rows given as arrays, one per column of `ROW_DTYPES`."""
        n = len(columns["trajectory_id"])
        self._reserve(n)
        for name, values in columns.items():
            self.arrays[name][self.size : self.size + n] = values
        self.size += n

    def absorb(
        self,
        RolloutGroup g,
        int32_t[::1] num_preempted,
        uint8_t[::1] completed,
        int16_t[::1] adapter_codes,
        list publish_times,
        int8_t completed_code,
        int8_t requeued_code,
    ):
        """Drain `g`'s finished attempts into rows; per-trajectory preemption counts and
        completed flags are updated. Returns each adapter's number of completed trajectories
        (a list by adapter code)."""
        cdef int64_t n = g.a_len, i, k, tid
        cdef int64_t num_adapters = len(publish_times)
        cdef list done = [0] * num_adapters
        cdef int64_t* done_counts
        cdef double** times
        cdef int64_t* num_times
        cdef double[::1] view
        cdef int16_t* codes
        if not n:
            return done
        codes = &adapter_codes[0]
        self._reserve(n)
        times = <double**>_grow(NULL, num_adapters * sizeof(double*))
        num_times = <int64_t*>_grow(NULL, num_adapters * sizeof(int64_t))
        done_counts = <int64_t*>_grow(NULL, num_adapters * sizeof(int64_t))
        try:
            for k in range(num_adapters):
                done_counts[k] = 0
                num_times[k] = 0
                if publish_times[k] is not None and len(publish_times[k]):
                    view = publish_times[k]
                    times[k] = &view[0]
                    num_times[k] = len(publish_times[k])
            k = self.size
            for i in range(n):  # re-queued rows first, counting the preemptions before
                if g.a_status[i] == STATUS_REQUEUED:
                    self._row(g, i, k, num_preempted[g.a_tid[i]], requeued_code,
                              times, num_times, codes)
                    k += 1
            for i in range(n):
                if g.a_status[i] == STATUS_REQUEUED:
                    num_preempted[g.a_tid[i]] += 1
            for i in range(n):
                if g.a_status[i] != STATUS_REQUEUED:
                    tid = g.a_tid[i]
                    self._row(g, i, k, num_preempted[tid], completed_code,
                              times, num_times, codes)
                    completed[tid] = 1
                    done_counts[codes[tid]] += 1
                    k += 1
            self.size = k
            g.a_len = 0
            for k in range(num_adapters):
                done[k] = done_counts[k]
        finally:
            free(times)
            free(num_times)
            free(done_counts)
        return done

    cdef inline void _row(
        self, RolloutGroup g, int64_t i, int64_t k, int32_t preemptions, int8_t status,
        double** times, int64_t* num_times, int16_t* codes,
    ) noexcept:
        cdef int64_t tid = g.a_tid[i], code = codes[g.a_tid[i]]
        cdef double t_start = g.a_t0[i]
        cdef int64_t lo = 0, hi = num_times[code], mid
        while lo < hi:  # versions published at or before t_start (bisect right)
            mid = (lo + hi) >> 1
            if t_start < times[code][mid]:
                hi = mid
            else:
                lo = mid + 1
        self.tid[k] = <int32_t>tid
        self.rank[k] = <int32_t>g.a_rank[i]
        self.t0[k] = t_start
        self.t1[k] = g.a_t1[i]
        self.recomputed[k] = <int32_t>g.a_g0[i]
        self.preemptions[k] = preemptions
        self.version[k] = <int32_t>lo
        self.status[k] = status
