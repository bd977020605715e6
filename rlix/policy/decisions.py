"""Decisions: the imperatives the policy core hands back to its driver.

Grant, Expand and Shrink move GPUs and are two-phase: the core counts them as done at once
(so it never hands out a GPU twice) and the driver reports `DecisionApplied` or `DecisionFailed`.
The driver carries the decisions of one round out in the order given; a decision whose
`requires` names a decision that failed must itself be reported failed, without being carried
out, and a decision may be reported applied only once every decision it requires was (the core
rejects an earlier report with an `EventError`). Revoke, AllowRollout, Place and Hold are
notifications: nothing to roll back, no report needed (a report for them is accepted and
ignored).

Decisions are plain slotted records, not frozen dataclasses: a cold round at cluster scale
builds hundreds of them and a frozen dataclass costs about three times as much to build
(each field goes through `object.__setattr__`). Drivers treat them as read-only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Decision:
    decision_id: int
    pipeline_id: str


@dataclass(slots=True)
class Grant(Decision):
    """Give a cluster its whole device mapping (a non-rollout stage, or init at priority 0)."""

    cluster: str
    priority: int
    gpus: tuple[int, ...]
    requires: tuple[int, ...] = ()


@dataclass(slots=True)
class Expand(Decision):
    """Start rollout rank `dp_rank` on its bundle (load the newest inference weights)."""

    dp_rank: int
    gpus: tuple[int, ...]
    requires: tuple[int, ...] = ()


@dataclass(slots=True)
class Shrink(Decision):
    """Stop rollout rank `dp_rank` and free its bundle. In-flight trajectories are re-queued.

    `reason` is "preempt" (for a higher-priority grant), "rebalance" (for another pipeline's
    rollout share), "release" (the pipeline's rollout demand ended) or "reclaim" (a loan of
    the home of a pipeline away between steps, handed back as its owner is due: see
    rlix.policy.look_ahead).

    `drain_s` > 0 lets the rank finish what it runs first: from the moment the driver gets the
    decision the rank takes no new trajectories, and it is cut when it runs none or `drain_s`
    later, whichever comes first (what it still runs then is re-queued as above); then it is
    offloaded and reported. The decisions that require this one wait that much longer at most.
    """

    dp_rank: int
    gpus: tuple[int, ...]
    reason: str
    requires: tuple[int, ...] = ()
    drain_s: float = 0.0


@dataclass(slots=True)
class Revoke(Decision):
    """A holding lost a GPU: abort that stage or rank. A non-rollout request is re-queued at its
    old place, and granted again when its mapping is whole. The holding's latest decision in
    flight, if any (its Grant, or the rank's latest Expand or Shrink), is over: a later report
    of it is ignored, as is any report of a decision no longer in flight. An earlier Shrink of
    the same rank that an Expand was queued behind is still in flight: report it as usual."""

    cluster: str
    gpus: tuple[int, ...]
    dp_rank: int = -1


@dataclass(slots=True)
class AllowRollout(Decision):
    """Staleness pacing: rollout for train steps <= `max_step` of this adapter may run."""

    adapter: str
    max_step: int


@dataclass(slots=True)
class Place(Decision):
    """A home given as a size was placed on `home`; `mappings` are the device mappings of the
    pipeline's clusters that follow the home or the pool (the pipeline's spec from now on is
    `rlix.policy.homes.resolve` of it, or `PipelineSpec` with these mappings)."""

    home: tuple[int, ...]
    mappings: dict[str, tuple[int, ...]]


@dataclass(slots=True)
class Hold(Decision):
    """A request waits; `reason` says why (for logs and dashboards)."""

    cluster: str
    priority: int
    reason: str


def describe(d: Decision) -> str:
    """One short line per decision, for logs, demos and golden tests."""
    if isinstance(d, Grant):
        return f"grant {d.pipeline_id}/{d.cluster} {list(d.gpus)}"
    if isinstance(d, Expand):
        return f"expand {d.pipeline_id}{d.dp_rank}"
    if isinstance(d, Shrink):
        return f"shrink {d.pipeline_id}{d.dp_rank} {d.reason}"
    if isinstance(d, Hold):
        return f"hold {d.pipeline_id}/{d.cluster}: {d.reason}"
    if isinstance(d, AllowRollout):
        return f"allow {d.pipeline_id}/{d.adapter} <= {d.max_step}"
    if isinstance(d, Place):
        return f"place {d.pipeline_id} on {list(d.home)}"
    if isinstance(d, Revoke):
        return f"revoke {d.pipeline_id}/{d.cluster} {list(d.gpus)}"
    return repr(d)
