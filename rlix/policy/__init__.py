"""rlix.policy: the pure scheduling core (standard library only).

Drivers build a `Scheduler`, feed it `events` and carry out its `decisions`; see
`rlix.policy.core` for the theory of operation.
"""

from rlix.policy.config import PolicyConfig
from rlix.policy.core import Scheduler
from rlix.policy.decisions import (
    AllowRollout,
    Decision,
    Expand,
    Grant,
    Hold,
    Place,
    Revoke,
    Shrink,
)
from rlix.policy.errors import EventError, InvariantViolation, PolicyError, SpecError
from rlix.policy.events import (
    ClusterReleased,
    ClusterReleasedAndRequested,
    ClusterRequested,
    DecisionApplied,
    DecisionFailed,
    DecisionsApplied,
    Event,
    GpuLost,
    GpuRestored,
    PipelineAdmitted,
    PipelineRegistered,
    PipelineRemoved,
    RanksProgressed,
    RequestWithdrawn,
    RolloutProgressed,
    Tick,
    TrainStepFinished,
)
from rlix.policy.policies import POLICIES, Policy, get_policy
from rlix.policy.specs import (
    BASE_ADAPTER,
    MAX_WORK,
    ROLLOUT_CLUSTER,
    ClusterSpec,
    PipelineKind,
    PipelineSpec,
    Priority,
    Topology,
)

__all__ = [
    "BASE_ADAPTER", "MAX_WORK", "POLICIES", "ROLLOUT_CLUSTER", "AllowRollout", "ClusterReleased",
    "ClusterReleasedAndRequested", "ClusterRequested", "ClusterSpec", "Decision",
    "DecisionApplied", "DecisionsApplied", "DecisionFailed", "Event", "EventError", "Expand", "GpuLost",
    "GpuRestored", "Grant", "Hold", "InvariantViolation", "PipelineAdmitted", "PipelineKind",
    "PipelineRegistered", "PipelineRemoved", "PipelineSpec", "Place", "Policy", "PolicyConfig",
    "PolicyError", "Priority", "RanksProgressed", "RequestWithdrawn", "Revoke", "RolloutProgressed", "Scheduler",
    "Shrink", "SpecError", "Tick", "Topology", "TrainStepFinished", "get_policy",
]
