# A pipeline's attempt rows (included by _engine.pyx): growing column arrays that
# rlix.sim.rollout fills from its group's finished attempts at every stop, in C (at ~10^6 stops
# a simulated day, a handful of numpy calls per stop cost more than the engines' own work).


cdef class _Versions:
    """Each adapter's publish times (by adapter code) as C arrays: the weight version an
    attempt started with is the number its adapter had published by then (bisect right)."""

    cdef list arrays  # keeps the arrays the pointers point into alive
    cdef double** times
    cdef int64_t* num_times

    def __cinit__(self, list publish_times):
        cdef int64_t k, n = len(publish_times)
        cdef double[::1] view
        self.arrays = []
        self.times = <double**>_grow(NULL, n * sizeof(double*))
        self.num_times = <int64_t*>_grow(NULL, n * sizeof(int64_t))
        for k in range(n):
            self.num_times[k] = 0
            array = publish_times[k]
            if array is not None and len(array):
                array = np.ascontiguousarray(array, dtype=np.float64)
                self.arrays.append(array)
                view = array
                self.times[k] = &view[0]
                self.num_times[k] = len(array)

    def __dealloc__(self):
        free(self.times)
        free(self.num_times)

    cdef inline int32_t of(self, int64_t code, double t_start) noexcept:
        cdef int64_t lo = 0, hi = self.num_times[code], mid
        cdef double* times = self.times[code]
        while lo < hi:
            mid = (lo + hi) >> 1
            if t_start < times[mid]:
                hi = mid
            else:
                lo = mid + 1
        return <int32_t>lo


cdef class AttemptRows:
    """The attempt rows of one pipeline so far, a C array per column (`take_columns`).

    `absorb` takes a group's finished attempts as rows: re-queued attempts first, then
    completed ones, each in the order the group finished them. A re-queued row counts the
    trajectory's preemptions before the batch of attempts it came in, a completed one all of
    them; the weight version is the number of versions its adapter had published by the
    attempt's start.

    With `keep` false (a run whose folder has no rollouts table) no row is kept: each absorb
    writes its rows over the last ones, so the memory is one absorb's rows, and only the
    running totals the summary needs stay (`num_requeued`, `recomputed_tokens`)."""

    cdef public int64_t size
    cdef public bint keep
    cdef public int64_t num_requeued
    cdef public int64_t recomputed_tokens
    cdef int64_t cap
    # One C array per column, grown by realloc: past glibc's mmap threshold that is mremap,
    # so growing a 10^8-row column neither copies nor re-touches it (numpy growth did both:
    # a fifth of a day's run).
    cdef int32_t* tid
    cdef int32_t* rank
    cdef double* t0
    cdef double* t1
    cdef int32_t* recomputed
    cdef int32_t* preemptions
    cdef int32_t* version
    cdef int8_t* status

    def __cinit__(self):
        self.tid = self.rank = self.recomputed = self.preemptions = self.version = NULL
        self.t0 = self.t1 = NULL
        self.status = NULL
        self.size = self.cap = 0
        self.keep = True
        self.num_requeued = self.recomputed_tokens = 0

    def __init__(self):
        self._reserve(1024)

    def __dealloc__(self):
        free(self.tid)
        free(self.rank)
        free(self.t0)
        free(self.t1)
        free(self.recomputed)
        free(self.preemptions)
        free(self.version)
        free(self.status)

    cdef void _reserve(self, int64_t n) except *:
        """Room for n more rows (growth by a quarter: a day's run has ~10^8 rows)."""
        if self.size + n <= self.cap:
            return
        cdef int64_t cap = max(self.cap * 5 // 4, self.size + n)
        self.tid = <int32_t*>_grow(self.tid, cap * sizeof(int32_t))
        self.rank = <int32_t*>_grow(self.rank, cap * sizeof(int32_t))
        self.t0 = <double*>_grow(self.t0, cap * sizeof(double))
        self.t1 = <double*>_grow(self.t1, cap * sizeof(double))
        self.recomputed = <int32_t*>_grow(self.recomputed, cap * sizeof(int32_t))
        self.preemptions = <int32_t*>_grow(self.preemptions, cap * sizeof(int32_t))
        self.version = <int32_t*>_grow(self.version, cap * sizeof(int32_t))
        self.status = <int8_t*>_grow(self.status, cap * sizeof(int8_t))
        self.cap = cap

    def _pointers(self):
        """(column name, its C array, its numpy dtype), in `ROW_DTYPES` order."""
        return [
            ("trajectory_id", <size_t>self.tid), ("dp_rank", <size_t>self.rank),
            ("t_start", <size_t>self.t0), ("t_end", <size_t>self.t1),
            ("recomputed_tokens", <size_t>self.recomputed),
            ("preemptions", <size_t>self.preemptions),
            ("weight_version", <size_t>self.version), ("status", <size_t>self.status),
        ]

    def take_columns(self):
        """Every column's rows as numpy arrays that own the memory (no copy); the rows are
        the caller's from then on and this holds none."""
        out = {}
        for name, address in self._pointers():
            out[name] = _owned_array(<void*><size_t>address, self.size, ROW_DTYPES[name])
        self.tid = self.rank = self.recomputed = self.preemptions = self.version = NULL
        self.t0 = self.t1 = NULL
        self.status = NULL
        self.size = self.cap = 0
        return out

    def append(self, int16_t[::1] adapter_codes, list publish_times, **columns):
        """Rows given as arrays, one per column of `ROW_DTYPES` but `weight_version`, which is
        found as `absorb` finds it (`adapter_codes` by trajectory, `publish_times` by code)."""
        cdef int64_t n = len(columns["trajectory_id"]), k
        cdef _Versions versions = _Versions(publish_times)
        self._reserve(n)
        for name, address in self._pointers():
            if name != "weight_version":
                view = _array_view(<void*><size_t>address, self.cap, ROW_DTYPES[name])
                view[self.size : self.size + n] = columns[name]
        for k in range(self.size, self.size + n):
            self.version[k] = versions.of(adapter_codes[self.tid[k]], self.t0[k])
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
        int64_t base=0,
    ):
        """Drain `g`'s finished attempts into rows; per-trajectory preemption counts and
        completed flags are updated. The per-trajectory arrays start at trajectory `base` (a
        caller that keeps no rows drops the completed ones before it). Returns each adapter's
        number of completed trajectories (a list by adapter code)."""
        cdef int64_t n = g.a_len, i, k, tid, num_adapters = len(publish_times)
        cdef _Versions versions
        cdef int16_t* codes
        cdef int64_t* counts
        if not n:
            return [0] * num_adapters
        versions = _Versions(publish_times)
        codes = &adapter_codes[0]
        counts = <int64_t*>_grow(NULL, num_adapters * sizeof(int64_t))
        for k in range(num_adapters):
            counts[k] = 0
        self._reserve(n)
        k = self.size
        for i in range(n):  # re-queued rows first, counting the preemptions before
            self.recomputed_tokens += g.a_g0[i]
            if g.a_status[i] == STATUS_REQUEUED:
                tid = g.a_tid[i] - base
                self._row(g, i, k, tid, num_preempted[tid], requeued_code, versions, codes)
                self.num_requeued += 1
                k += 1
        for i in range(n):
            if g.a_status[i] == STATUS_REQUEUED:
                num_preempted[g.a_tid[i] - base] += 1
        for i in range(n):
            if g.a_status[i] != STATUS_REQUEUED:
                tid = g.a_tid[i] - base
                self._row(g, i, k, tid, num_preempted[tid], completed_code, versions, codes)
                completed[tid] = 1
                counts[codes[tid]] += 1
                k += 1
        if self.keep:
            self.size = k
        g.a_len = 0
        done = [counts[k] for k in range(num_adapters)]
        free(counts)
        return done

    cdef inline void _row(
        self, RolloutGroup g, int64_t i, int64_t k, int64_t tid, int32_t preemptions,
        int8_t status, _Versions versions, int16_t* codes,
    ) noexcept:
        """Row k from attempt i; `tid` indexes the per-trajectory arrays (`codes`)."""
        self.tid[k] = <int32_t>g.a_tid[i]
        self.rank[k] = <int32_t>g.a_rank[i]
        self.t0[k] = g.a_t0[i]
        self.t1[k] = g.a_t1[i]
        self.recomputed[k] = <int32_t>g.a_g0[i]
        self.preemptions[k] = preemptions
        self.version[k] = versions.of(codes[tid], g.a_t0[i])
        self.status[k] = status
