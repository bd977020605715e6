"""Events: the past-tense facts a driver hands to the policy core.

Every event carries the driver's `now` (seconds, float, never decreasing). The core never reads
a clock; `now` is all it knows of time.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlix.policy.specs import PipelineSpec


@dataclass(frozen=True, slots=True)
class Event:
    now: float


@dataclass(frozen=True, slots=True)
class PipelineRegistered(Event):
    """A pipeline spec was submitted; it is validated and known, but holds nothing yet."""

    spec: PipelineSpec


@dataclass(frozen=True, slots=True)
class PipelineAdmitted(Event):
    """A registered pipeline may now request GPUs (the policy may still gate it)."""

    pipeline_id: str


@dataclass(frozen=True, slots=True)
class PipelineRemoved(Event):
    """A pipeline finished or failed and its actors are dead: all its GPUs are free."""

    pipeline_id: str
    failed: bool = False


@dataclass(frozen=True, slots=True)
class ClusterRequested(Event):
    """A pipeline asks for a cluster at a stage priority.

    `actor_infer` at Priority.ROLLOUT starts rollout demand, with `estimate` units of rollout
    work (e.g. trajectories or tokens; a finite number in [0, MAX_WORK], 1 when omitted);
    rollout ranks then expand and shrink elastically.
    Any cluster at priorities 0-5 is granted its whole device mapping at once (gang). A gang
    over GPUs the pipeline holds in another cluster is refused (EventError): it would wait for
    a release its own wait holds back; ClusterReleasedAndRequested hands over instead.
    """

    pipeline_id: str
    cluster: str
    priority: int
    estimate: float | None = None


@dataclass(frozen=True, slots=True)
class ClusterReleased(Event):
    """A pipeline gave back a cluster. For a non-rollout cluster its GPUs are free now; for
    `actor_infer` the rollout demand ends and the core shrinks every active rank."""

    pipeline_id: str
    cluster: str


@dataclass(frozen=True, slots=True)
class ClusterReleasedAndRequested(Event):
    """Release one cluster and request another as one atomic transition (nobody can slip in
    between except an older request that the released GPUs were reserved for)."""

    pipeline_id: str
    released: str
    requested: str
    priority: int
    estimate: float | None = None


@dataclass(frozen=True, slots=True)
class RequestWithdrawn(Event):
    """A pipeline no longer wants a cluster it requested and was not granted (it changed its
    mind, or a Revoke re-queued a request it gives up).

    For a non-rollout cluster the pending request leaves the queue; a grant already emitted
    cannot be withdrawn (release the cluster once the grant is applied). For `actor_infer` at
    the rollout priority it ends the rollout demand, exactly like `ClusterReleased`: ranks not
    yet started are never started, and ranks already emitted or active are shrunk ("release").
    The driver need not know whether the core already emitted an Expand for it.
    """

    pipeline_id: str
    cluster: str


@dataclass(frozen=True, slots=True)
class RolloutProgressed(Event):
    """Rollout work still to do for one adapter of a pipeline (the sum over adapters is the
    pipeline's demand). With `adapter=None` a multi-LoRA pipeline reports one total.

    Until an adapter reports, it counts its share (1 / number of adapters) of the request's
    estimate, or of the last pipeline-wide total if one was reported since; a total replaces
    every per-adapter figure. `remaining` is a finite number in [0, MAX_WORK]."""

    pipeline_id: str
    remaining: float
    adapter: str | None = None


@dataclass(frozen=True, slots=True)
class RanksProgressed(Event):
    """Where a pipeline's rollout work is: `in_flight` pairs (dp_rank, trajectories running on
    that rank) for its active ranks, and `queued` trajectories no rank has taken yet.

    The policy uses it to tell a pipeline in its tail (nothing queued: every trajectory left is
    already on a rank) and which of its ranks are idle, so that the idle ones are the ones moved
    and the busy ones are not cut (their trajectories would be re-queued and recomputed).
    Optional: a driver that never reports gets the split by remaining work alone. The report
    holds until the next one or the end of the rollout."""

    pipeline_id: str
    in_flight: tuple[tuple[int, int], ...]
    queued: int


@dataclass(frozen=True, slots=True)
class TrainStepFinished(Event):
    """A train step finished: weights of `version` now exist for that adapter."""

    pipeline_id: str
    version: int
    adapter: str | None = None


@dataclass(frozen=True, slots=True)
class DecisionApplied(Event):
    """The driver carried out decision `decision_id` (after every decision it `requires`)."""

    decision_id: int


@dataclass(frozen=True, slots=True)
class DecisionsApplied(Event):
    """Several decisions carried out by the same moment, reported together: the same as one
    `DecisionApplied` per id in this order, but with one decision round after the last
    instead of one after each. A driver whose weight loads or offloads end together reports
    them so (in a large simulation most rounds would otherwise follow one of these reports).
    Each id comes after every decision it `requires` (earlier in the tuple counts)."""

    decision_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DecisionFailed(Event):
    """The driver could not carry out decision `decision_id`; it changed nothing on the GPUs."""

    decision_id: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class GpuLost(Event):
    gpu: int


@dataclass(frozen=True, slots=True)
class GpuRestored(Event):
    gpu: int


@dataclass(frozen=True, slots=True)
class Tick(Event):
    """Time passed; lets backed-off retries happen."""
