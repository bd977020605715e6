"""Emitting decisions and settling them: the two-phase bookkeeping of the core.

A decision that moves GPUs changes the core's state the moment it is emitted, so the next
decision in the same round already sees it. Its undo is implied by its kind:

- Grant: the holding goes away, its GPUs are free, the request returns to the queue at its
  old place (same arrival number) after a back-off.
- Expand: the rank is inactive again, its GPUs free, and it is not retried before a back-off.
- Shrink: the rank is active again on its bundle, and is not shrunk again before a back-off
  (a rank whose actor hangs would otherwise be shrunk and fail in every round, for ever).

A GPU freed by a Shrink that is still in flight is "releasing": whoever takes it next gets the
Shrink in its `requires`, and a failed Shrink first fails everything that required it, so undo
always finds the GPUs it needs free. For the same reason a decision may not be reported applied
while a decision it requires is still in flight (the core rejects that report). Reports for
decisions already settled (or belonging to a removed pipeline) are ignored, which makes
settling idempotent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
from rlix.policy.look_ahead import measure_move
from rlix.policy.state import (
    RANK_ACTIVE,
    RANK_EXPANDING,
    RANK_INACTIVE,
    ClusterHold,
    HoldStatus,
    Rank,
    RankStatus,
    Request,
)

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler

NAN = float("nan")


class Ledger:
    """Owns decision ids, the in-flight table and the output list of the current round."""

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        self.next_id = 1
        self.inflight: dict[int, tuple[Decision, ClusterHold | Rank]] = {}
        self.dependents: dict[int, list[int]] = {}
        self.out: list[Decision] = []

    def _new_id(self) -> int:
        decision_id = self.next_id
        self.next_id += 1
        return decision_id

    def _requires(self, gpus: tuple[int, ...], extra: list[int]) -> tuple[int, ...]:
        releasing = self.sched.cluster.releasing_by
        if not releasing or releasing.keys().isdisjoint(gpus):
            return tuple(sorted(extra)) if extra else ()
        needed = set(extra)
        for gpu in gpus:
            shrink_id = releasing.get(gpu)
            if shrink_id is not None:
                needed.add(shrink_id)
        return tuple(sorted(needed))

    def _track(self, decision: Decision, holder: ClusterHold | Rank, requires: tuple[int, ...]) -> None:
        self.inflight[decision.decision_id] = (decision, holder)
        for needed in requires:
            if needed in self.inflight:
                self.dependents.setdefault(needed, []).append(decision.decision_id)
        self.out.append(decision)

    # --- emitting -------------------------------------------------------------------------

    def grant(self, request: Request, gpus: tuple[int, ...], extra_requires: list[int]) -> Grant:
        sched = self.sched
        requires = self._requires(gpus, extra_requires)
        decision = Grant(self._new_id(), request.pipeline_id, request.cluster, request.priority, gpus, requires)
        hold = ClusterHold(request.pipeline_id, request.cluster, request.priority, gpus, request)
        hold.decision_id = decision.decision_id
        sched.cluster.take(gpus, hold)
        pipeline = sched.pipelines[request.pipeline_id]
        del pipeline.pending[request.cluster]
        pipeline.holdings[request.cluster] = hold
        sched.queue.remove(request)
        self._track(decision, hold, requires)
        return decision

    def expand(self, rank: Rank) -> Expand:
        # The hottest path of a round (one call per rank started): _new_id and _track are
        # inlined, and for a bundle no other slot overlaps (the common case) so are
        # ClusterState.take's fast path and the `requires` search. Such a bundle is free
        # exactly when its slot is, and its GPUs are releasing all for one Shrink or not at all
        # (a Shrink releases a whole bundle, and settling it clears exactly its own entries).
        sched = self.sched
        cluster = sched.cluster
        gpus = rank.gpus
        slot = rank.slot
        releasing = cluster.releasing_by
        num_gpus = len(gpus)
        if slot in cluster.partial_overlap or cluster.slot_num_busy[slot]:
            requires = self._requires(gpus, []) if releasing else ()
            cluster.take(gpus, rank)  # the general case (and its error if the bundle is held)
        else:
            shrink_id = releasing.get(gpus[0]) if releasing else None
            requires = () if shrink_id is None else (shrink_id,)
            owner = cluster.owner
            for gpu in gpus:
                owner[gpu] = rank
            cluster.slot_num_busy[slot] = num_gpus
            cluster.free_bits ^= cluster.slot_mask[slot]
            cluster.num_free -= num_gpus
        decision_id = self.next_id
        self.next_id = decision_id + 1
        decision = Expand(decision_id, rank.pipeline_id, rank.dp_rank, gpus, requires)
        rank.status = RANK_EXPANDING
        rank.decision_id = decision_id
        rank.emitted_s = NAN if requires else sched.now
        pipeline = sched.pipelines[rank.pipeline_id]
        pipeline.num_active_gpus += num_gpus
        pipeline.activate(rank)
        if requires:
            self._track(decision, rank, requires)
        else:
            self.inflight[decision_id] = (decision, rank)
            self.out.append(decision)
        return decision

    def shrink(self, rank: Rank, reason: str, drain_s: float = 0.0) -> Shrink:
        assert rank.status is RANK_ACTIVE, "only active ranks are shrunk"
        sched = self.sched
        decision = Shrink(self._new_id(), rank.pipeline_id, rank.dp_rank, rank.gpus, reason, drain_s=drain_s)
        self._deactivate(rank)
        releasing = sched.cluster.releasing_by
        for gpu in rank.gpus:
            releasing[gpu] = decision.decision_id
        rank.decision_id = decision.decision_id
        rank.emitted_s = sched.now
        self._track(decision, rank, ())
        return decision

    def hand_over(self, victim: Rank, rank: Rank) -> None:
        """Shrink active `victim` ("rebalance") and expand inactive `rank` on the same bundle:
        exactly the decisions and state of `shrink` then `expand`, for the commonest move of a
        rebalance, a few times cheaper. The bundle never becomes free, so the free-slot index
        is untouched, and the Expand requires just this Shrink (it sets every GPU releasing)."""
        gpus = victim.gpus
        assert rank.slot == victim.slot and victim.status is RANK_ACTIVE and rank.status is RANK_INACTIVE
        sched = self.sched
        shrink_id = self.next_id
        expand_id = shrink_id + 1
        self.next_id = shrink_id + 2
        shrink = Shrink(shrink_id, victim.pipeline_id, victim.dp_rank, gpus, "rebalance")
        expand = Expand(expand_id, rank.pipeline_id, rank.dp_rank, rank.gpus, (shrink_id,))
        owner = sched.cluster.owner
        releasing = sched.cluster.releasing_by
        for gpu in gpus:
            owner[gpu] = rank  # a GPU of an active rank is never offline: it was revoked
            releasing[gpu] = shrink_id
        victim.status = RANK_INACTIVE
        victim.decision_id = shrink_id
        victim.emitted_s = sched.now
        num_gpus = len(gpus)
        donor = sched.pipelines[victim.pipeline_id]
        donor.num_active_gpus -= num_gpus
        donor.deactivate(victim.dp_rank)
        rank.status = RANK_EXPANDING
        rank.decision_id = expand_id
        rank.emitted_s = NAN
        receiver = sched.pipelines[rank.pipeline_id]
        receiver.num_active_gpus += num_gpus
        receiver.activate(rank)
        self.inflight[shrink_id] = (shrink, victim)
        self.inflight[expand_id] = (expand, rank)
        self.dependents[shrink_id] = [expand_id]
        self.out += (shrink, expand)

    def _deactivate(self, rank: Rank) -> None:
        sched = self.sched
        sched.cluster.free(rank.gpus, rank)
        rank.status = RANK_INACTIVE
        pipeline = sched.pipelines[rank.pipeline_id]
        pipeline.num_active_gpus -= len(rank.gpus)
        pipeline.deactivate(rank.dp_rank)

    def hold(self, request: Request, reason: str) -> None:
        if request.hold_reason != reason:
            request.hold_reason = reason
            self.out.append(Hold(self._new_id(), request.pipeline_id, request.cluster, request.priority, reason))

    def allow_rollout(self, pipeline_id: str, adapter: str, max_step: int) -> None:
        self.out.append(AllowRollout(self._new_id(), pipeline_id, adapter, max_step))

    def place(self, pipeline_id: str, home: tuple[int, ...], mappings: dict[str, tuple[int, ...]]) -> None:
        self.out.append(Place(self._new_id(), pipeline_id, home, mappings))

    def revoke(self, holder: ClusterHold | Rank) -> None:
        """A GPU under `holder` was lost: drop the holding at once (it is a fact, not a plan)."""
        sched = self.sched
        self.inflight.pop(holder.decision_id, None)
        if isinstance(holder, Rank):
            self.out.append(Revoke(self._new_id(), holder.pipeline_id, "actor_infer", holder.gpus, holder.dp_rank))
            if holder.status is not RankStatus.INACTIVE:
                self._deactivate(holder)
            holder.release_when_applied = False
            return
        self.out.append(Revoke(self._new_id(), holder.pipeline_id, holder.cluster, holder.gpus))
        self._drop_hold(holder)
        sched.requeue(holder.request, retry_after_s=sched.now)

    def _drop_hold(self, hold: ClusterHold) -> None:
        sched = self.sched
        sched.cluster.free(hold.gpus, hold)
        del sched.pipelines[hold.pipeline_id].holdings[hold.cluster]

    # --- settling -------------------------------------------------------------------------

    def unsettled_requirements(self, decision_id: int) -> list[int]:
        """The decisions that `decision_id` requires and that are still in flight."""
        entry = self.inflight.get(decision_id)
        if entry is None or not isinstance(entry[0], Grant | Expand):
            return []
        return [needed for needed in entry[0].requires if needed in self.inflight]

    def applied(self, decision_id: int) -> None:
        entry = self.inflight.pop(decision_id, None)
        if entry is None:
            return
        decision, holder = entry
        self.dependents.pop(decision_id, None)
        if isinstance(decision, Grant):
            assert isinstance(holder, ClusterHold)
            holder.status = HoldStatus.HELD
            holder.held_since_s = self.sched.now
        elif isinstance(decision, Expand):
            assert isinstance(holder, Rank)
            holder.status = RankStatus.ACTIVE
            measure_move(self.sched, holder, loaded=True)
            if holder.release_when_applied:
                holder.release_when_applied = False
                self.shrink(holder, "release")
        elif isinstance(decision, Shrink):
            assert isinstance(holder, Rank)
            measure_move(self.sched, holder, loaded=False)
            self._clear_releasing(decision)

    def _clear_releasing(self, decision: Shrink) -> None:
        releasing = self.sched.cluster.releasing_by
        for gpu in decision.gpus:
            if releasing.get(gpu) == decision.decision_id:
                del releasing[gpu]

    def failed(self, decision_id: int) -> None:
        entry = self.inflight.pop(decision_id, None)
        if entry is None:
            return
        decision, holder = entry
        for dependent in self.dependents.pop(decision_id, []):
            self.failed(dependent)
        sched = self.sched
        backoff_until = sched.now + sched.config.retry_backoff_s
        if isinstance(decision, Grant):
            assert isinstance(holder, ClusterHold)
            self._drop_hold(holder)
            sched.requeue(holder.request, retry_after_s=backoff_until)
        elif isinstance(decision, Expand):
            assert isinstance(holder, Rank)
            self._deactivate(holder)
            holder.release_when_applied = False
            holder.retry_after_s = backoff_until
        elif isinstance(decision, Shrink):
            assert isinstance(holder, Rank)
            self._undo_shrink(decision, holder)
            holder.shrink_retry_after_s = backoff_until

    def _undo_shrink(self, decision: Shrink, rank: Rank) -> None:
        sched = self.sched
        self._clear_releasing(decision)
        if any(gpu in sched.cluster.offline for gpu in rank.gpus):
            # The rank cannot come back whole: it lost a GPU while its shrink was in flight.
            self.out.append(Revoke(self._new_id(), rank.pipeline_id, "actor_infer", rank.gpus, rank.dp_rank))
            return
        sched.cluster.take(rank.gpus, rank)
        rank.status = RankStatus.ACTIVE
        pipeline = sched.pipelines[rank.pipeline_id]
        pipeline.num_active_gpus += len(rank.gpus)
        pipeline.activate(rank)

    def forget_pipeline(self, pipeline_id: str) -> None:
        """Drop the in-flight decisions of a removed pipeline (its actors are dead, so its
        shrinks count as done for anyone who required them)."""
        releasing = self.sched.cluster.releasing_by
        for decision_id, (decision, _holder) in list(self.inflight.items()):
            if decision.pipeline_id != pipeline_id:
                continue
            del self.inflight[decision_id]
            self.dependents.pop(decision_id, None)
            if isinstance(decision, Shrink):
                for gpu in decision.gpus:
                    if releasing.get(gpu) == decision_id:
                        del releasing[gpu]

    def take_output(self) -> list[Decision]:
        out, self.out = self.out, []
        return out

