"""Event handlers: validate one fact against the state in full, then apply it.

Each handler raises `EventError` (or `SpecError`) before its first change, so a rejected event
leaves the scheduler exactly as it was. The decision round runs after the handler, in the core.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlix.policy import events as ev
from rlix.policy.drain import measure_hold
from rlix.policy.errors import EventError
from rlix.policy.homes import resolve
from rlix.policy.look_ahead import (
    note_back,
    note_init_done,
    note_left,
    note_rollout_end,
    note_tail,
    note_training,
)
from rlix.policy.specs import (
    MAX_WORK,
    ROLLOUT_CLUSTER,
    PipelineSpec,
    Priority,
    is_int,
    is_number,
)
from rlix.policy.state import HoldStatus, PipelineState, Rank, RankStatus, Request

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler


# --- pipelines ------------------------------------------------------------------------------


def on_registered(sched: Scheduler, event: ev.PipelineRegistered) -> None:
    spec = event.spec
    if not isinstance(spec, PipelineSpec):
        raise EventError("spec", spec, "must be a PipelineSpec")
    spec.validate(sched.topology)
    if spec.pipeline_id in sched.pipelines:
        raise EventError("pipeline_id", spec.pipeline_id, "already registered")
    pipeline = PipelineState(spec=spec, registered_seq=sched.new_seq())
    pipeline.placed = spec.placed
    for adapter in spec.adapter_names:
        pipeline.versions[adapter] = 0
    sched.pipelines[spec.pipeline_id] = pipeline
    sched.cluster.count_home(spec.home, 1)
    _add_ranks(sched, pipeline)


def _add_ranks(sched: Scheduler, pipeline: PipelineState) -> None:
    """The pipeline's rollout ranks, one per bundle of its mapping (none while its home is a
    size not placed yet), and the slot index updated for them."""
    rollout = pipeline.spec.rollout
    home = set(pipeline.spec.home)
    for dp_rank in range(rollout.num_ranks):
        bundle = rollout.bundle(dp_rank)
        rank = Rank(pipeline.pipeline_id, dp_rank, bundle, sched.cluster.slot_for(bundle))
        pipeline.ranks.append(rank)
        pipeline.rank_by_slot[rank.slot] = rank
        if home.issuperset(bundle):
            pipeline.home_rollout_gpus += len(bundle)
    cluster = sched.cluster
    renumbered = cluster.index_slots()
    for other in sched.pipelines.values() if renumbered else [pipeline]:
        other.slot_bits = cluster.bits_of(other.rank_by_slot)
    cluster.union_cache = None


def place(sched: Scheduler, pipeline: PipelineState, home: tuple[int, ...], confine: bool) -> None:
    """Place the pipeline's sized home on `home` (see rlix.policy.homes): its spec from now on
    maps every cluster that follows the home or the pool, its ranks exist, and the driver
    hears of it (`Place`)."""
    assert not pipeline.spec.placed and not pipeline.ranks
    spec = resolve(pipeline.spec, home, sched.topology, confine)
    pipeline.spec = spec
    pipeline.placed = True
    sched.cluster.count_home(spec.home, 1)
    _add_ranks(sched, pipeline)
    mappings = {name: c.mapping for name, c in spec.clusters.items() if c.scope}
    sched.ledger.place(pipeline.pipeline_id, spec.home, mappings)


def on_admitted(sched: Scheduler, event: ev.PipelineAdmitted) -> None:
    pipeline = sched.pipeline(event.pipeline_id)
    if pipeline.admitted:
        raise EventError("pipeline_id", event.pipeline_id, "already admitted")
    pipeline.admitted_seq = sched.new_seq()
    pipeline.admitted_s = sched.now
    for adapter in pipeline.spec.adapter_names:
        _pace(sched, pipeline, adapter)


def on_removed(sched: Scheduler, event: ev.PipelineRemoved) -> None:
    pipeline = sched.pipeline(event.pipeline_id)
    if not isinstance(event.failed, bool):  # the run record keeps it: a job failed or finished
        raise EventError("failed", event.failed, "must be True or False")
    sched.ledger.forget_pipeline(pipeline.pipeline_id)
    cluster = sched.cluster
    for hold in list(pipeline.holdings.values()):
        cluster.free(hold.gpus, hold)
    for rank in list(pipeline.active.values()):
        cluster.free(rank.gpus, rank)
        rank.status = RankStatus.INACTIVE
    for request in pipeline.pending.values():
        sched.queue.remove(request)
    del sched.pipelines[pipeline.pipeline_id]
    sched.away.pop(pipeline.pipeline_id, None)
    cluster.count_home(pipeline.spec.home, -1)


# --- requests and releases ------------------------------------------------------------------


def _check_cluster(pipeline: PipelineState, cluster: str, field: str = "cluster") -> None:
    if not isinstance(cluster, str) or cluster not in pipeline.spec.clusters:
        raise EventError(field, cluster, f"pipeline {pipeline.pipeline_id} has no such cluster")


def _check_work(field: str, value: object) -> None:
    if not (is_number(value) and 0 <= value <= MAX_WORK):
        raise EventError(field, value, f"must be a finite number in [0, {MAX_WORK:g}]")


def _check_request(
    sched: Scheduler, pipeline: PipelineState, cluster: str, priority: int, estimate: float | None,
    releasing: str | None = None,
) -> None:
    pid = pipeline.pipeline_id
    if not pipeline.admitted:
        raise EventError("pipeline_id", pid, "request before the pipeline was admitted")
    _check_cluster(pipeline, cluster, "requested" if releasing is not None else "cluster")
    if not is_int(priority) or not 0 <= priority <= 6:
        raise EventError("priority", priority, "must be an integer stage priority 0..6")
    if priority == Priority.ROLLOUT and cluster != ROLLOUT_CLUSTER:
        raise EventError("priority", priority, f"only {ROLLOUT_CLUSTER} is requested at the rollout priority")
    if estimate is not None:
        _check_work("estimate", estimate)
    if cluster in pipeline.pending:
        raise EventError("cluster", cluster, f"pipeline {pid} already has a pending request for it")
    if cluster in pipeline.holdings and cluster != releasing:
        raise EventError("cluster", cluster, f"pipeline {pid} already holds it (release it first)")
    if cluster == ROLLOUT_CLUSTER and pipeline.rolling and releasing != ROLLOUT_CLUSTER:
        raise EventError("cluster", cluster, f"pipeline {pid} is already rolling out")
    if priority != Priority.ROLLOUT:
        _check_not_waiting_on_itself(pipeline, cluster, releasing)


def _check_not_waiting_on_itself(pipeline: PipelineState, cluster: str, releasing: str | None) -> None:
    # A gang is granted whole, and only the holder frees its own cluster: a request for GPUs
    # the pipeline itself holds in another cluster could only be granted after a release
    # that, waiting for the grant, it never sends.
    wanted = set(pipeline.spec.clusters[cluster].mapping)
    for held_cluster, hold in pipeline.holdings.items():
        shared = sorted(wanted.intersection(hold.gpus))
        if held_cluster != releasing and shared:
            raise EventError(
                "cluster", cluster,
                f"pipeline {pipeline.pipeline_id} holds GPUs {shared} of it in {held_cluster}: it would "
                f"wait for itself (release {held_cluster} first, or release and request in one event)",
            )


def _apply_request(
    sched: Scheduler, pipeline: PipelineState, cluster: str, priority: int, estimate: float | None
) -> None:
    note_back(sched, pipeline, priority == Priority.ROLLOUT)
    if priority == Priority.ROLLOUT:
        pipeline.start_rollout(1.0 if estimate is None else float(estimate))
        return
    note_training(sched, pipeline)
    sched.enqueue(Request(pipeline.pipeline_id, cluster, priority, sched.new_seq()))


def on_requested(sched: Scheduler, event: ev.ClusterRequested) -> None:
    pipeline = sched.pipeline(event.pipeline_id)
    _check_request(sched, pipeline, event.cluster, event.priority, event.estimate)
    if event.cluster == ROLLOUT_CLUSTER and event.priority != Priority.ROLLOUT and pipeline.rolling:
        raise EventError("cluster", event.cluster, "cannot gang-request actor_infer while rolling out")
    _apply_request(sched, pipeline, event.cluster, event.priority, event.estimate)


def _check_release(pipeline: PipelineState, cluster: str, field: str = "cluster") -> None:
    pid = pipeline.pipeline_id
    _check_cluster(pipeline, cluster, field)
    hold = pipeline.holdings.get(cluster)
    if hold is not None:
        if hold.status is not HoldStatus.HELD:
            raise EventError(field, cluster, f"the grant to {pid} was not applied yet")
        return
    if cluster == ROLLOUT_CLUSTER and pipeline.rolling:
        return
    raise EventError(field, cluster, f"pipeline {pid} does not hold it")


def _apply_release(sched: Scheduler, pipeline: PipelineState, cluster: str) -> None:
    hold = pipeline.holdings.pop(cluster, None)
    if hold is not None:
        sched.cluster.free(hold.gpus, hold)
        measure_hold(sched, pipeline, hold)
        if hold.priority == Priority.INIT:
            note_init_done(pipeline)
        return
    note_rollout_end(sched, pipeline)
    pipeline.end_rollout()  # the round shrinks the active ranks ("release")


def on_released(sched: Scheduler, event: ev.ClusterReleased) -> None:
    pipeline = sched.pipeline(event.pipeline_id)
    _check_release(pipeline, event.cluster)
    _apply_release(sched, pipeline, event.cluster)
    note_left(sched, pipeline)


def on_released_and_requested(sched: Scheduler, event: ev.ClusterReleasedAndRequested) -> None:
    pipeline = sched.pipeline(event.pipeline_id)
    _check_release(pipeline, event.released, "released")
    _check_request(sched, pipeline, event.requested, event.priority, event.estimate, releasing=event.released)
    _apply_release(sched, pipeline, event.released)
    _apply_request(sched, pipeline, event.requested, event.priority, event.estimate)


def on_withdrawn(sched: Scheduler, event: ev.RequestWithdrawn) -> None:
    pipeline = sched.pipeline(event.pipeline_id)
    cluster = event.cluster
    _check_cluster(pipeline, cluster)
    request = pipeline.pending.get(cluster)
    if request is not None:
        del pipeline.pending[cluster]
        sched.queue.remove(request)
        note_left(sched, pipeline)
        return
    if cluster == ROLLOUT_CLUSTER and pipeline.rolling:
        note_rollout_end(sched, pipeline)
        pipeline.end_rollout()  # as a release: the round shrinks whatever was started
        note_left(sched, pipeline)
        return
    if cluster in pipeline.holdings:
        raise EventError("cluster", cluster, f"pipeline {pipeline.pipeline_id} was already granted it (release it)")
    raise EventError("cluster", cluster, f"pipeline {pipeline.pipeline_id} has no pending request for it")


# --- rollout progress and staleness ---------------------------------------------------------


def _adapter(pipeline: PipelineState, adapter: str | None) -> str:
    if adapter is None and pipeline.spec.adapters:
        raise EventError("adapter", adapter, f"multi_lora pipeline {pipeline.pipeline_id} must name the adapter")
    if adapter is not None and not isinstance(adapter, str):
        raise EventError("adapter", adapter, "must be an adapter name")
    name = pipeline.adapter_or_base(adapter)
    if name not in pipeline.versions:
        raise EventError("adapter", adapter, f"pipeline {pipeline.pipeline_id} has no such adapter")
    return name


def on_progressed(sched: Scheduler, event: ev.RolloutProgressed) -> None:
    pipeline = sched.pipeline(event.pipeline_id)
    if not pipeline.rolling:
        raise EventError("pipeline_id", event.pipeline_id, "progress reported while not rolling out")
    remaining = event.remaining
    _check_work("remaining", remaining)
    if event.adapter is None and pipeline.spec.adapters:
        # A multi-LoRA pipeline may report one total instead of one figure per adapter.
        pipeline.report_remaining(None, float(remaining))
        return
    pipeline.report_remaining(_adapter(pipeline, event.adapter), float(remaining))


def on_ranks_progressed(sched: Scheduler, event: ev.RanksProgressed) -> None:
    pipeline = sched.pipeline(event.pipeline_id)
    if not pipeline.rolling:
        raise EventError("pipeline_id", event.pipeline_id, "rank progress reported while not rolling out")
    if not is_int(event.queued) or event.queued < 0:
        raise EventError("queued", event.queued, "must be an integer >= 0")
    pairs = event.in_flight
    if not isinstance(pairs, tuple | list):
        raise EventError("in_flight", pairs, "must be (dp_rank, trajectories) pairs")
    in_flight: dict[int, int] = {}
    for pair in pairs:
        if not (isinstance(pair, tuple | list) and len(pair) == 2 and all(is_int(x) and x >= 0 for x in pair)):
            raise EventError("in_flight", pair, "must be a (dp_rank, trajectories) pair of integers >= 0")
        rank, count = pair
        if rank >= len(pipeline.ranks) or rank in in_flight:
            raise EventError("in_flight", pair, f"names rank {rank} twice or a rank pipeline {pipeline.pipeline_id} does not have")
        in_flight[rank] = count
    pipeline.report_ranks(in_flight, event.queued)
    note_tail(sched, pipeline)


def on_step_finished(sched: Scheduler, event: ev.TrainStepFinished) -> None:
    pipeline = sched.pipeline(event.pipeline_id)
    adapter = _adapter(pipeline, event.adapter)
    version = event.version
    if not is_int(version) or version <= pipeline.versions[adapter]:
        raise EventError("version", version, f"must be an integer above {pipeline.versions[adapter]}")
    pipeline.versions[adapter] = version
    pipeline.first_version_at.setdefault(adapter, (sched.now, version))
    pipeline.last_version_s[adapter] = sched.now
    if pipeline.admitted:
        _pace(sched, pipeline, adapter)


def _pace(sched: Scheduler, pipeline: PipelineState, adapter: str) -> None:
    """Staleness pacing: rollout for step s may start once version s - k exists."""
    max_step = pipeline.versions[adapter] + pipeline.spec.staleness_of(adapter)
    if pipeline.allowed_step.get(adapter) != max_step:
        pipeline.allowed_step[adapter] = max_step
        sched.ledger.allow_rollout(pipeline.pipeline_id, adapter, max_step)


# --- decision reports, GPUs, time -----------------------------------------------------------


def _check_decision_id(sched: Scheduler, decision_id: int) -> None:
    if not is_int(decision_id) or not 1 <= decision_id < sched.ledger.next_id:
        raise EventError("decision_id", decision_id, "no decision with this id was issued")


def on_applied(sched: Scheduler, event: ev.DecisionApplied) -> None:
    _check_decision_id(sched, event.decision_id)
    unsettled = sched.ledger.unsettled_requirements(event.decision_id)
    if unsettled:
        raise EventError(
            "decision_id", event.decision_id,
            f"reported applied before the decisions it requires ({unsettled}) were reported applied",
        )
    sched.ledger.applied(event.decision_id)


def on_applied_together(sched: Scheduler, event: ev.DecisionsApplied) -> None:
    ids = event.decision_ids
    if not isinstance(ids, tuple | list) or not ids:
        raise EventError("decision_ids", ids, "must be a non-empty list of decision ids")
    earlier: set[int] = set()
    for decision_id in ids:  # all checked before any is applied: a rejected event changes nothing
        _check_decision_id(sched, decision_id)
        if decision_id in earlier:
            raise EventError("decision_ids", decision_id, "is reported twice in one event")
        unsettled = [r for r in sched.ledger.unsettled_requirements(decision_id) if r not in earlier]
        if unsettled:
            raise EventError(
                "decision_ids", decision_id,
                f"reported applied before the decisions it requires ({unsettled}) were reported applied",
            )
        earlier.add(decision_id)
    for decision_id in ids:
        sched.ledger.applied(decision_id)


def on_failed(sched: Scheduler, event: ev.DecisionFailed) -> None:
    _check_decision_id(sched, event.decision_id)
    if not isinstance(event.reason, str):  # the run record keeps it as the failure's text
        raise EventError("reason", event.reason, "must be a string")
    sched.ledger.failed(event.decision_id)


def _check_gpu(sched: Scheduler, gpu: int) -> None:
    if not is_int(gpu) or not 0 <= gpu < sched.topology.num_gpus:
        raise EventError("gpu", gpu, f"not a GPU of this cluster [0, {sched.topology.num_gpus})")


def on_gpu_lost(sched: Scheduler, event: ev.GpuLost) -> None:
    _check_gpu(sched, event.gpu)
    if event.gpu in sched.cluster.offline:
        raise EventError("gpu", event.gpu, "already lost")
    holder = sched.cluster.owner[event.gpu]
    sched.cluster.set_offline(event.gpu, True)
    if holder is not None:
        sched.ledger.revoke(holder)


def on_gpu_restored(sched: Scheduler, event: ev.GpuRestored) -> None:
    _check_gpu(sched, event.gpu)
    if event.gpu not in sched.cluster.offline:
        raise EventError("gpu", event.gpu, "is not lost")
    sched.cluster.set_offline(event.gpu, False)


def on_tick(sched: Scheduler, event: ev.Tick) -> None:
    """Nothing to apply: the round retries whatever a back-off was holding."""


HANDLERS: dict[type[ev.Event], Callable[[Any, Any], None]] = {
    ev.PipelineRegistered: on_registered,
    ev.PipelineAdmitted: on_admitted,
    ev.PipelineRemoved: on_removed,
    ev.ClusterRequested: on_requested,
    ev.ClusterReleased: on_released,
    ev.ClusterReleasedAndRequested: on_released_and_requested,
    ev.RequestWithdrawn: on_withdrawn,
    ev.RolloutProgressed: on_progressed,
    ev.RanksProgressed: on_ranks_progressed,
    ev.TrainStepFinished: on_step_finished,
    ev.DecisionApplied: on_applied,
    ev.DecisionsApplied: on_applied_together,
    ev.DecisionFailed: on_failed,
    ev.GpuLost: on_gpu_lost,
    ev.GpuRestored: on_gpu_restored,
    ev.Tick: on_tick,
}
