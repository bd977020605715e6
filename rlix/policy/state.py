"""The core's view of its pipelines: ranks, cluster holds, requests, and what the core
measures of each pipeline. Who holds which GPU is `ClusterState` (rlix.policy.cluster).

The state is plain mutable objects owned by one `Scheduler`. Ownership changes go through the
few methods of `ClusterState` (`take`, `free`, `set_offline`) so the free-slot index stays
exact; the two per-rank hot paths of the ledger are the exceptions, kept equal to them by
tests/policy/test_fast_paths.py (`Ledger.expand` inlines `take`'s fast path, and
`Ledger.hand_over` passes a held bundle from rank to rank, which leaves the index as it is).
A "slot" is one distinct TP bundle (a tuple of GPU ids); ranks of different pipelines
whose bundles are the same GPUs share a slot, which is what makes finding a free bundle for a
pipeline cheap: intersect the free slots with the pipeline's slots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from rlix.policy.specs import BASE_ADAPTER, TOTAL_KEY, PipelineSpec


class RankStatus(Enum):
    INACTIVE = "inactive"
    EXPANDING = "expanding"  # Expand emitted, not yet applied
    ACTIVE = "active"


# Looking a member up on its Enum class costs about 140 ns (EnumType attribute access), a
# module global about 20: the per-move hot paths (ledger, placement) compare with these.
RANK_INACTIVE = RankStatus.INACTIVE
RANK_EXPANDING = RankStatus.EXPANDING
RANK_ACTIVE = RankStatus.ACTIVE


class HoldStatus(Enum):
    GRANTING = "granting"  # Grant emitted, not yet applied
    HELD = "held"


@dataclass(slots=True, eq=False)
class Request:
    """A pending non-rollout request. `seq` is the arrival number assigned by the core; it is
    kept when a failed grant re-queues the request, so FIFO order survives failures."""

    pipeline_id: str
    cluster: str
    priority: int
    seq: int
    retry_after_s: float = float("-inf")
    hold_reason: str = ""

    @property
    def order(self) -> tuple[int, int, str]:
        return (self.priority, self.seq, self.pipeline_id)


@dataclass(slots=True, eq=False)
class ClusterHold:
    """A non-rollout cluster holding its whole mapping (also init of actor_infer)."""

    pipeline_id: str
    cluster: str
    priority: int
    gpus: tuple[int, ...]
    request: Request
    status: HoldStatus = HoldStatus.GRANTING
    decision_id: int = -1
    held_since_s: float = float("nan")  # when its grant was applied


@dataclass(slots=True, eq=False)
class Rank:
    """A rollout data-parallel rank on its fixed bundle."""

    pipeline_id: str
    dp_rank: int
    gpus: tuple[int, ...]
    slot: int
    status: RankStatus = RankStatus.INACTIVE
    decision_id: int = -1
    retry_after_s: float = float("-inf")  # a failed Expand: not restarted before this
    shrink_retry_after_s: float = float("-inf")  # a failed Shrink: not shrunk again before this
    release_when_applied: bool = False
    #: When its in-flight Expand or Shrink was emitted (nan: an Expand that waits for a Shrink,
    #: whose time is not its own), to measure the pipeline's load and offload times.
    emitted_s: float = float("nan")
    #: The id of the Expand that woke it ahead of its pipeline's return (rlix.policy.wake_ahead);
    #: such a rank, still loading, is not released with its pipeline's other idle ranks.
    woken_ahead_id: int = -1


Holder = ClusterHold | Rank


@dataclass(slots=True, eq=False)
class PipelineState:
    spec: PipelineSpec
    registered_seq: int
    admitted_seq: int = -1
    admitted_s: float = float("-inf")  # when it was admitted (the job order's aging)
    ranks: list[Rank] = field(default_factory=list)
    rank_by_slot: dict[int, Rank] = field(default_factory=dict)
    slot_bits: int = 0  # ClusterState bits of this pipeline's rank slots
    holdings: dict[str, ClusterHold] = field(default_factory=dict)
    pending: dict[str, Request] = field(default_factory=dict)
    rolling: bool = False
    #: A rollout request not yet answered by a first rank (read by the RLix model, gap_ratio.py).
    rollout_request_pending: bool = False
    estimate: float = 0.0
    #: Progress reports: adapter -> remaining work, or {TOTAL_KEY: total} right after a
    #: pipeline-wide report of a multi-LoRA pipeline (adapter=None; "*" is no adapter name).
    remaining: dict[str, float] = field(default_factory=dict)
    #: The last pipeline-wide total, kept when adapters report after it (their baseline).
    reported_total: float | None = None
    #: Rollout work still to do: each adapter's last report; an adapter that has not reported
    #: counts its share of the last pipeline-wide total, or else of the estimate. Kept as its
    #: inputs change (start_rollout, report_remaining, end_rollout): a round reads it several
    #: times per rolling pipeline (the split, donor order, lending order), hundreds of times
    #: on a pool of hundreds of jobs.
    demand: float = 0.0
    #: The last RanksProgressed of this rollout: trajectories running per dp_rank, and queued
    #: (None: no report since the rollout started).
    in_flight: dict[int, int] | None = None
    queued: int = 0
    #: dp_ranks the last report found running trajectories (kept with `in_flight`).
    busy: frozenset[int] = frozenset()
    #: How many of `busy` are in `active`: kept as either changes (report_ranks, activate,
    #: deactivate), since every round reads it for each pipeline in its tail (busy_gpus).
    num_busy_active: int = 0
    #: Nothing queued by the last report: every trajectory left runs on a rank (kept in step
    #: with `in_flight` and `queued` by the core; read on every round).
    in_tail: bool = False
    #: The spec maps every cluster (false only for a sized home not placed yet).
    placed: bool = True
    num_active_gpus: int = 0  # GPUs of EXPANDING or ACTIVE ranks
    #: EXPANDING or ACTIVE ranks by dp_rank; changed through activate/deactivate only.
    active: dict[int, Rank] = field(default_factory=dict)
    #: Its active ranks as a donor gives them, idle first (rlix.policy.placement._idle_first):
    #: cached, since a round asks for it once per donor per rank moved; None when `active`,
    #: `busy`, `in_flight` or `in_tail` changed (every place that changes them clears it).
    donor_order_cache: list[Rank] | None = None
    versions: dict[str, int] = field(default_factory=dict)
    allowed_step: dict[str, int] = field(default_factory=dict)
    #: GPUs of its rollout ranks that lie inside its home (the most the home floor gives).
    home_rollout_gpus: int = 0
    #: When this pipeline last took ranks from, or gave ranks to, another by a rebalance.
    last_rebalanced_in_s: float = float("-inf")
    last_rebalanced_out_s: float = float("-inf")
    #: Measured by the core (rlix.policy.look_ahead): how long an Expand (a weight load) and a
    #: Shrink (an offload) of this pipeline take, emitted to applied; nan until measured.
    load_s: float = float("nan")
    offload_s: float = float("nan")
    #: Away: holding, requesting and rolling out nothing (between steps). Since when (nan: not
    #: away), and how long its last absence lasted (nan: none yet).
    away_since_s: float = float("nan")
    last_away_s: float = float("nan")
    #: Its last absence ended in a rollout request (rlix.policy.wake_ahead).
    returns_rolling: bool = False
    #: When its last step's training began (its first request after a rollout; nan: none
    #: yet) and how long after the one before (nan: one at most), and whether the next
    #: request after a rollout is yet to come (rlix.policy.look_ahead, rule 4).
    gang_at_s: float = float("nan")
    gang_period_s: float = float("nan")
    gang_armed: bool = False
    #: When this rollout's tail began (its first report with nothing queued; nan: not yet),
    #: and how long its tails last, a running mean measured by the core (nan: none yet).
    tail_since_s: float = float("nan")
    tail_s: float = float("nan")
    #: The GPUs of its home no other home covers, with the bits of the slots on them, and the
    #: (slot count, homes version) they were found for (rlix.policy.look_ahead.own_home).
    own_home: tuple[tuple[int, ...], int] = ((), 0)
    own_home_key: tuple[int, int] = (-1, -1)
    #: The bits of its own bundles lying wholly on that home, kept with it (look-ahead rule 3).
    own_home_slots: int = 0
    #: Measured by the core (rlix.policy.drain): how long it holds each non-rollout cluster,
    #: grant applied to release, a running mean over its stages there.
    hold_s: dict[str, float] = field(default_factory=dict)
    #: Per adapter, the (time, version) of the first new version the core saw and the time of
    #: the latest (its version is `versions`): their mean step period (rlix.policy.finish).
    first_version_at: dict[str, tuple[float, int]] = field(default_factory=dict)
    last_version_s: dict[str, float] = field(default_factory=dict)
    #: The pipeline's weight in the rollout split this round: the spec's, times the finish
    #: factor when `PolicyConfig.finish_together` is on (rlix.policy.finish).
    split_weight: float = 1.0
    #: In its tail it is held at its busy ranks (PolicyConfig.keep_busy_tail); false while the
    #: split weighs it by its projected time left and its tails last long (rlix.policy.finish).
    tail_held: bool = True

    # Copied from the spec: read on every hot path.
    pipeline_id: str = field(init=False)
    tp: int = field(init=False)  # rollout TP size: GPUs per rank
    num_adapters: int = field(init=False)
    #: Every adapter (or the base) trains on-policy (staleness 0): each step waits for its last
    #: trajectory, and no rollout of the next step overlaps the tail.
    on_policy: bool = field(init=False)

    def __post_init__(self) -> None:
        self.pipeline_id = self.spec.pipeline_id
        self.split_weight = self.spec.weight
        self.tp = self.spec.rollout.tp
        self.num_adapters = len(self.spec.adapter_names)
        self.on_policy = all(self.spec.staleness_of(a) == 0 for a in self.spec.adapter_names)

    def start_rollout(self, estimate: float) -> None:
        self.rolling = True
        self.donor_order_cache = None
        self.rollout_request_pending = True
        self.estimate = estimate
        self.remaining = {}
        self.reported_total = None
        self.demand = self._work_left()
        self.in_flight = None
        self.in_tail = False
        self.gang_armed = True
        # A rank released while its Expand was in flight is wanted again: keep it.
        for rank in self.active.values():
            rank.release_when_applied = False

    def end_rollout(self) -> None:
        self.rolling = False
        self.donor_order_cache = None
        self.rollout_request_pending = False
        self.estimate = 0.0
        self.remaining = {}
        self.reported_total = None
        self.demand = 0.0
        self.in_flight = None
        self.in_tail = False

    def report_ranks(self, in_flight: dict[int, int], queued: int) -> None:
        """A RanksProgressed: where the rollout work is. In its tail when nothing is queued and
        an active rank runs trajectories: every trajectory left already runs on a rank, so more
        ranks cannot help it and idle ranks are free to go. Nothing queued and nothing running
        on an active rank while work remains is no tail: that work is on its way back to the
        queue (a rank leaving hands back what it ran after the report was made), and a
        pipeline taken for in its tail there would be given no rank to finish it."""
        self.in_flight = in_flight
        self.queued = queued
        self.donor_order_cache = None
        self.busy = frozenset(rank for rank, count in in_flight.items() if count)
        self.num_busy_active = len(self.active.keys() & self.busy)
        self.in_tail = self.rolling and queued == 0 and self.num_busy_active > 0

    def activate(self, rank: Rank) -> None:
        """`rank` (EXPANDING or ACTIVE now) joins `active`."""
        self.active[rank.dp_rank] = rank
        self.donor_order_cache = None
        if rank.dp_rank in self.busy:
            self.num_busy_active += 1

    def deactivate(self, dp_rank: int) -> None:
        """The rank leaves `active`: what it ran, by the last report, is queued again (until the
        next report says where it went), so the pipeline is out of its tail if it had any."""
        del self.active[dp_rank]
        self.donor_order_cache = None
        if dp_rank in self.busy:
            self.num_busy_active -= 1
        if self.in_flight:
            count = self.in_flight.pop(dp_rank, 0)
            if count:
                self.queued += count
                self.busy = self.busy - {dp_rank}
                self.in_tail = False

    @property
    def held_in_tail(self) -> bool:
        """In its tail and held there: a rebalance keeps its busy ranks (keep_busy_tail)."""
        return self.in_tail and self.tail_held

    def busy_gpus(self) -> int:
        """GPUs of the active ranks that run trajectories (by the last report)."""
        return self.tp * self.num_busy_active

    @property
    def admitted(self) -> bool:
        return self.admitted_seq >= 0

    def report_remaining(self, adapter: str | None, remaining: float) -> None:
        """A RolloutProgressed: `adapter`'s remaining work, or (None) one total for every
        adapter of a multi-LoRA pipeline."""
        if adapter is None:
            self.reported_total = remaining
            self.remaining = {TOTAL_KEY: remaining}
        else:
            self.remaining.pop(TOTAL_KEY, None)  # still the baseline of adapters yet to report
            self.remaining[adapter] = remaining
        self.demand = self._work_left()

    def _work_left(self) -> float:
        """`demand` worked out from its inputs."""
        if not self.rolling:
            return 0.0
        remaining = self.remaining
        num_adapters = self.num_adapters
        if len(remaining) == num_adapters:
            return sum(remaining.values())
        if TOTAL_KEY in remaining:
            return remaining[TOTAL_KEY]
        baseline = self.estimate if self.reported_total is None else self.reported_total
        return sum(remaining.values()) + baseline * (num_adapters - len(remaining)) / num_adapters

    def adapter_or_base(self, adapter: str | None) -> str:
        return BASE_ADAPTER if adapter is None else adapter
