# Declarations of the compiled rollout engines (_engine.pyx): one rank's closed-form state and
# the group of a pipeline's ranks sharing a queue. See rlix/sim/engine.py for the model.

from libc.stdint cimport int8_t, int32_t, int64_t

ctypedef struct Event:
    double t
    int64_t rank
    int64_t version


cdef class Engine:
    cdef public int64_t dp_rank
    cdef public double t_ready
    cdef double t0
    cdef int64_t n0
    cdef public int64_t b
    cdef int64_t kv
    cdef double extra_s
    cdef double ev_t
    cdef int64_t ev_n
    cdef int64_t version
    cdef double busy_since  # < 0: not busy
    cdef bint hungry
    cdef public bint closed  # draining: admits nothing, runs what it holds
    cdef double migrate_at
    # Heap of running keys `finish << 32 | idx` (stale keys of preempted sequences included:
    # a key is live while its trajectory runs here under that key).
    cdef int64_t* heap
    cdef int64_t heap_len
    cdef int64_t heap_cap
    # Running sequences by slot, linked in admission order (head: oldest, tail: latest).
    cdef int64_t num_slots
    cdef void* slots  # one block holding the six arrays below
    cdef int64_t* s_idx
    cdef int64_t* s_g0
    cdef double* s_tstart
    cdef int64_t* s_key
    cdef int32_t* s_prev
    cdef int32_t* s_next
    cdef int32_t s_head
    cdef int32_t s_tail
    cdef int32_t s_free

    cdef Engine copy(self)
    cdef void copy_into(self, Engine other) except *
    cdef void _point_slots(self) noexcept
    cdef void heap_push(self, int64_t key) noexcept
    cdef int64_t heap_pop(self) noexcept
    cdef int32_t admit(self, int64_t idx, int64_t g0, double t, int64_t key) noexcept
    cdef void unlink(self, int32_t s) noexcept


cdef class RolloutGroup:
    cdef readonly object costs
    cdef readonly bint balance
    cdef readonly bint migrate_on_expand
    cdef readonly int64_t tp
    cdef readonly int64_t max_batch
    cdef readonly int64_t kv_capacity_tokens
    cdef readonly int64_t admit_limit_tokens
    cdef public double now
    cdef double* alpha
    cdef double beta
    cdef double prefill_per_token_s
    # Per trajectory: numpy int64 arrays (shared by copies until one submits) and their data.
    cdef object tid_a
    cdef object prompt_a
    cdef object resp_a
    cdef object batch_a
    cdef int64_t* tid
    cdef int64_t* prompt
    cdef int64_t* resp
    cdef int64_t* batch
    cdef int64_t n_sub
    cdef int64_t traj_cap
    cdef bint shared_lists
    cdef int32_t* slot_of
    # The queue front: a ring buffer of re-queued (index, generated prefix).
    cdef int64_t* f_idx
    cdef int64_t* f_g0
    cdef int64_t f_head
    cdef int64_t f_len
    cdef int64_t f_cap
    cdef int64_t qhead
    # Batches by dense slot: id and trajectories left.
    cdef list batch_ids
    cdef int64_t* batch_left
    cdef dict batch_slot
    cdef list done
    # Attempt records, a C array per field.
    cdef int64_t* a_tid
    cdef int64_t* a_rank
    cdef double* a_t0
    cdef double* a_t1
    cdef int64_t* a_gen
    cdef int64_t* a_g0
    cdef int8_t* a_status
    cdef int64_t a_len
    cdef int64_t a_cap
    cdef list busy
    cdef dict engines_by_rank
    cdef list engine_at
    cdef Event* ev
    cdef int64_t ev_len
    cdef int64_t ev_cap
    cdef Event* wk
    cdef int64_t wk_len
    cdef int64_t wk_cap
    cdef dict hungry
    cdef int64_t num_closed
    cdef int64_t num_open
    cdef int64_t version_seq
    cdef readonly int64_t num_compactions

    cdef void _set_lists(self, list arrays) except *
    cdef void _own_lists(self, int64_t n) except *
    cdef void _check_advanced_to(self, double t, str what) except *
