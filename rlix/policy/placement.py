"""Where a rollout rank can go this round: the candidate search of the `rlix` planner.

`RoundPlanner` answers three questions for a pipeline short of its target, each cheaper than
the next and each asked only when the one before found nothing:

- `free_fit`: a free bundle it may use (bitsets: the free slots and the pipeline's slots as
  Python ints, so the search is a few big-int operations, not a scan);
- `donor_fit`: a bundle held by active ranks of donors (pipelines above their targets), taking
  from no donor more than it holds above its target (a rebalance never makes a new shortfall);
- `relocation_fit`, for a first bundle only: a bundle held by ranks of pipelines that cannot
  spare them, each such pipeline made whole in the same round by as many of its own ranks on
  free bundles or on donors' bundles. This is what gives a TP-4 newcomer its bundle when the
  GPUs are held by TP-1 or TP-2 ranks of pipelines at their targets;
- `kept_back_fit`, for a first bundle found nowhere else: a free bundle on the home of an
  away pipeline that the look-ahead keeps back because its owner returns too soon for a loan
  to pay. Last, not first: a newcomer there makes the returning owner wait for its offload
  (math-rlvr, 16 seeds: 197.8 -> 198.6 steps/h). Never a home whose loans are due for
  reclaim already (look-ahead rule 2): the rank would be shrunk as soon as it had loaded, and
  a pipeline reclaimed from one such home would be lent the next and back again.

Ranks whose Expand failed (`retry_after_s`) are not restarted and ranks whose Shrink failed
(`shrink_retry_after_s`) are not shrunk before their back-off ends; reserved GPUs go only to
the pipelines exempt from the reservation (`rlix.policy.admission`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from rlix.policy.state import RANK_ACTIVE, RANK_INACTIVE, PipelineState, Rank

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler
    from rlix.policy.look_ahead import Loans


#: A move: the receiver's rank, the ranks it displaces, and for rollers it would take below
#: their targets, the ranks that make them whole again (each with the ranks it displaces).
Move = tuple[Rank, list[Rank], list[tuple[Rank, list[Rank]]]]


def usable_by(sched: Scheduler, rank: Rank, pipeline_id: str) -> bool:
    """Whether `rank`, inactive, may be expanded for `pipeline_id` now: not backing off after a
    failed decision, and on no GPU reserved against it (rlix.policy.admission)."""
    if rank.status is not RANK_INACTIVE or rank.retry_after_s > sched.now:
        return False
    reservations = sched.reservations
    if reservations.reserved_for:
        return not any(reservations.blocks(g, pipeline_id) for g in rank.gpus)
    return True


def is_donor(sched: Scheduler, pipeline: PipelineState, any_donor: bool = False) -> bool:
    """Above its target, and not itself given ranks by a rebalance too recently (unless
    `any_donor`: it is asked for another pipeline's first bundle, the one-bundle minimum not
    being noise, or for its owner's home back)."""
    return pipeline.num_active_gpus > sched.targets.get(pipeline.pipeline_id, 0) and (
        any_donor or sched.now >= pipeline.last_rebalanced_in_s + sched.config.min_rebalance_interval_s
    )


def may_receive(sched: Scheduler, pipeline: PipelineState) -> bool:
    """May take ranks from donors: it did not give ranks away by a rebalance too recently."""
    return sched.now >= pipeline.last_rebalanced_out_s + sched.config.min_rebalance_interval_s


class RoundPlanner:
    """Per-round candidate search for one scheduler; built fresh every round."""

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        self.cluster = sched.cluster
        # Fixed for the round (the requests were served before rollout is planned); kept here
        # because free_fit runs once per rank started and every attribute hop shows.
        self.now = sched.now
        self.reserved = sched.reservations.reserved_for
        # pipeline -> bits of free bundles it may not use this round (reserved, backing off,
        # forbidden); none changes within a round, so each is looked at once
        self._unusable: dict[str, int] = {}
        # pipeline -> bits of bundles it may not be lent this round (rlix.policy.look_ahead),
        # asked of the loans on first use: most rollers of a round on a large pool are never
        # placed, and asking for every one of them cost a sixth of a lab-day round
        self._forbidden: dict[str, int] = {}
        #: The round's loans (set by the rlix planner under look-ahead): what each pipeline
        #: may not be lent, and for a first bundle which homes are due for reclaim now.
        self.loans: Loans | None = None
        #: Donors given ranks by a recent rebalance donate too (see is_donor): set while a
        #: pipeline's first bundle is searched for, or an owner takes its own home back.
        self.any_donor = False

    def forbidden(self, pipeline: PipelineState) -> int:
        """The slot bits `pipeline` may not be lent this round (rlix.policy.look_ahead)."""
        loans = self.loans
        if loans is None:
            return 0
        bits = self._forbidden.get(pipeline.pipeline_id)
        if bits is None:
            bits = self._forbidden[pipeline.pipeline_id] = loans.blocked_bits(pipeline)
        return bits

    def blocked_for_every_roller(self) -> int:
        """The slot bits no roller of the round may be lent (`Loans.blocked_for_every_roller`)."""
        return self.loans.blocked_for_every_roller() if self.loans is not None else 0

    def nothing_free_for(self, pipeline: PipelineState) -> bool:
        """Whether `free_fit` surely finds nothing for `pipeline`, known without its own blocked
        bits: no free bundle in its mapping, or all of them on homes no roller may be lent.
        Stays true for the rest of the round's lending, which only takes free bundles."""
        candidates = self.cluster.free_bits & pipeline.slot_bits
        return not candidates or self._kept_from_all(pipeline, candidates)

    def _kept_from_all(self, pipeline: PipelineState, candidates: int) -> bool:
        """Every one of `candidates` lies on homes no roller may be lent, and `pipeline` is a
        roller whose forbidden bits are its own (not yet asked, nor let go by `kept_back_fit`):
        they hold those homes, so none of the candidates is its to take."""
        loans = self.loans
        pid = pipeline.pipeline_id
        return (loans is not None and pid not in self._forbidden
                and not candidates & ~loans.blocked_for_every_roller() and loans.rolls(pid))

    def unusable(self, pipeline: PipelineState) -> int:
        """The bits of free bundles `pipeline` may not use this round, as far as known: those
        the look-ahead forbids it (less any `kept_back_fit` allowed) and backing-off ones seen."""
        unusable = self._unusable.get(pipeline.pipeline_id)
        if unusable is None:
            unusable = self._unusable[pipeline.pipeline_id] = self.forbidden(pipeline)
        return unusable

    def _reclaiming(self, pipeline: PipelineState) -> int:
        """Slots of homes whose loans to `pipeline` are being reclaimed: no first bundle there,
        by relocation or as the last resort (rlix.policy.look_ahead, rule 2)."""
        return self.loans.reclaiming_bits(pipeline) if self.loans is not None else 0

    def free_fit(self, pipeline: PipelineState) -> Rank | None:
        """The inactive rank of `pipeline` on the free bundle with the lowest GPU ids (its
        lowest free rank when its mapping is in GPU order): the lowest bit of the free bits
        and the pipeline's bits, so the search is a few big-int operations, not a scan."""
        cluster = self.cluster
        pid = pipeline.pipeline_id
        candidates = cluster.free_bits & pipeline.slot_bits
        if not candidates:
            return None
        unusable = self._unusable.get(pid)
        if unusable is None:
            if self._kept_from_all(pipeline, candidates):
                return None
            unusable = self.unusable(pipeline)
        if unusable:
            candidates &= ~unusable
        while candidates:
            lowest = candidates & -candidates
            rank = pipeline.rank_by_slot[cluster.slot_of_bit[lowest.bit_length() - 1]]
            # A free bundle's rank is inactive; it may still be backing off or reserved.
            if rank.retry_after_s <= self.now and (not self.reserved or usable_by(self.sched, rank, pid)):
                return rank
            candidates ^= lowest
            unusable |= lowest
            self._unusable[pid] = unusable
        return None

    def kept_back_fit(self, pipeline: PipelineState) -> Rank | None:
        """A first bundle found nowhere else (free, from donors or by relocation) comes first: a
        free bundle on a home kept back for its owner (rlix.policy.look_ahead). Tried last,
        since its owner is about to return and would wait for this rank's offload."""
        pid = pipeline.pipeline_id
        forbidden = self.forbidden(pipeline)
        if not forbidden or pipeline.num_active_gpus:
            return None
        unusable = self.unusable(pipeline)  # before the forbidden bits are let go: from them
        self._forbidden[pid] = 0
        allowed = forbidden & ~self._reclaiming(pipeline)
        self._unusable[pid] = unusable & ~allowed
        return self.free_fit(pipeline)

    def donor_fit(
        self, pipeline: PipelineState, donors: list[PipelineState], only: int = 0, near: int = 0
    ) -> tuple[Rank, list[Rank]] | None:
        """A rank of `pipeline` whose bundle is free or held by donors' active ranks, taking
        from no donor more than it holds above its target: the first that takes a single rank
        of the donor with the most work left, else the one that needs the fewest donor ranks.
        With `only` (slot bits of `pipeline`'s bundles) and `near` (the bits of every slot
        sharing a GPU with those), only a rank on `only` is started and only donors' ranks on
        `near` are taken: their bundles differ where the TP sizes do."""
        mine = pipeline.rank_by_slot
        pid = pipeline.pipeline_id
        donor_ids: set[str] | None = None  # only needed for bundles that overlap others
        partial = self.cluster.partial_overlap
        now = self.now
        reserved = self.reserved
        best: tuple[int, Rank, list[Rank]] | None = None
        keep_tail = self.sched.config.keep_busy_tail
        bits = pipeline.slot_bits
        forbidden = self.forbidden(pipeline)
        slot_mask = self.cluster.slot_mask
        for donor in donors:
            if not partial and not (donor.slot_bits & bits):
                # Every bundle aligned, and none of the donor's mapping in ours: none of its
                # ranks can be taken (at cluster-1024 scale most donors, so skipped first).
                continue
            ranks: Iterable[Rank] = donor.active.values()
            if keep_tail and donor.in_flight:
                ranks = _idle_first(donor)  # without the busy ranks a held tail keeps
            for donor_rank in ranks:
                slot = donor_rank.slot
                if forbidden and slot_mask[slot] & forbidden:
                    continue  # a loan that would not pay (rlix.policy.look_ahead)
                if only and not slot_mask[slot] & near:
                    continue
                if slot not in partial:
                    # An aligned bundle: the receiver's rank there (if any) needs exactly it,
                    # and one rank is never more than a donor holds above its target. (The
                    # hottest loop of a rebalance: a bundle outside the receiver's mapping is
                    # skipped first, and usable_by's checks are inlined.)
                    rank = mine.get(slot)
                    if only and not slot_mask[slot] & only:
                        continue
                    if (
                        rank is not None and donor_rank.status is RANK_ACTIVE and donor_rank.shrink_retry_after_s <= now
                        and rank.status is RANK_INACTIVE and rank.retry_after_s <= now
                        and (not reserved or usable_by(self.sched, rank, pid))
                    ):
                        return rank, [donor_rank]
                    continue
                if donor_rank.status is not RANK_ACTIVE or donor_rank.shrink_retry_after_s > now:
                    continue
                if donor_ids is None:
                    donor_ids = {d.pipeline_id for d in donors}
                for other in self._overlapping(slot):
                    if only and not slot_mask[other] & only:
                        continue
                    rank = mine.get(other)
                    if rank is None or not usable_by(self.sched, rank, pid):
                        continue
                    victims = self._victims(rank.gpus, pid, donor_ids)
                    if victims is None or self._overdrawn(victims, {}):
                        continue
                    if keep_tail and any(_kept(v, self.sched) for v in victims):
                        continue
                    if len(victims) == 1:
                        return rank, victims
                    if best is None or len(victims) < best[0]:
                        best = (len(victims), rank, victims)
        return None if best is None else (best[1], best[2])

    def relocation_fit(self, pipeline: PipelineState, rollers: set[str]) -> Move | None:
        """A first bundle for `pipeline` that takes ranks of other rollers beyond what they
        hold above target (or that are not donors at all), each such roller made whole in the
        same round by as many of its own ranks elsewhere, on free bundles or on bundles of
        donors within their excess. This is what gives a TP-4 newcomer its bundle when the
        GPUs are held by TP-1 or TP-2 ranks of pipelines at their targets: no roller ends
        below its target, and none moves for less than a whole first bundle of another."""
        pid = pipeline.pipeline_id
        # The search changes nothing, so where a displaced roller could go is the same for
        # every bundle tried: each roller's candidates are found once (see _make_whole).
        spots: dict[str, list[tuple[Rank, list[Rank]]]] = {}
        now, reserved = self.now, self.reserved
        # Not on a home whose loans are being reclaimed (the rank would be shrunk once loaded);
        # a home kept back otherwise is fair game for a first bundle, as in kept_back_fit.
        reclaiming = self._reclaiming(pipeline)
        slot_mask = self.cluster.slot_mask
        for rank in pipeline.ranks:
            # usable_by, its common case inlined (once per rank of the receiver, every round)
            if rank.status is not RANK_INACTIVE or rank.retry_after_s > now:
                continue
            if reclaiming and slot_mask[rank.slot] & reclaiming:
                continue
            if reserved and not usable_by(self.sched, rank, pid):
                continue
            victims = self._victims(rank.gpus, pid, rollers)
            if not victims:
                continue  # blocked (or free: free_fit would have found it)
            move = self._make_whole(rank, victims, rollers, spots)
            if move is not None:
                return move
        return None

    def _make_whole(
        self, rank: Rank, victims: list[Rank], rollers: set[str], spots: dict[str, list[tuple[Rank, list[Rank]]]]
    ) -> Move | None:
        sched = self.sched
        for victim in victims:
            # How nearly every try fails, so checked before anything is built (the search
            # runs every round while a first bundle waits): a displaced roller with fewer
            # GPUs to spare than one rank of its own and nowhere else to go.
            owner = sched.pipelines[victim.pipeline_id]
            if not self._spots(owner, rollers, spots) and self._excess(owner) < owner.tp:
                return None
        # GPUs of the receiver's bundle and of every rank already displaced: a replacement
        # never lands on them (a displaced rank is shrunk once and counted once).
        claimed = set(rank.gpus).union(g for victim in victims for g in victim.gpus)
        spent: dict[str, int] = {}
        for victim in victims:
            spent[victim.pipeline_id] = spent.get(victim.pipeline_id, 0) + len(victim.gpus)
        shortfall = {
            pid: lost - max(self._excess(sched.pipelines[pid]), 0) for pid, lost in spent.items()
        }
        extra: list[tuple[Rank, list[Rank]]] = []
        for victim_id, short in shortfall.items():
            places = self._spots(sched.pipelines[victim_id], rollers, spots)
            while short > 0:
                found = self._replacement(places, claimed, spent)
                if found is None:
                    return None
                extra.append(found)
                claimed.update(found[0].gpus)
                claimed.update(g for victim in found[1] for g in victim.gpus)
                short -= len(found[0].gpus)
        return rank, victims, extra

    def _spots(
        self, owner: PipelineState, rollers: set[str], found: dict[str, list[tuple[Rank, list[Rank]]]]
    ) -> list[tuple[Rank, list[Rank]]]:
        """The ranks of `owner` it may start, on bundles free or held only by active ranks of
        donors (other than itself), each with those ranks, in `owner.ranks` order; kept in
        `found` for the rest of the search."""
        oid = owner.pipeline_id
        spots = found.get(oid)
        if spots is not None:
            return spots
        donors = {
            pid for pid in rollers if pid != oid and is_donor(self.sched, self.sched.pipelines[pid], self.any_donor)
        }
        spots = found[oid] = []
        # Not onto a home kept back for its owner (rlix.policy.look_ahead), as donor_fit: a
        # displaced roller put there is reclaimed at once, and with moves that take no time the
        # reclaim and the relocation would undo each other at the same instant for ever.
        forbidden = self.forbidden(owner)
        slot_mask = self.cluster.slot_mask
        for candidate in owner.ranks:
            if forbidden and slot_mask[candidate.slot] & forbidden:
                continue
            if usable_by(self.sched, candidate, oid):
                victims = self._victims(candidate.gpus, oid, donors)
                if victims is not None:
                    spots.append((candidate, victims))
        return spots

    def _replacement(
        self, spots: list[tuple[Rank, list[Rank]]], claimed: set[int], spent: dict[str, int]
    ) -> tuple[Rank, list[Rank]] | None:
        """A rank of an owner (its `_spots`) off `claimed`, on a free bundle (preferred) or on
        donors' ranks within what they hold above target (counting `spent`, which this
        updates)."""
        fallback: tuple[Rank, list[Rank]] | None = None
        for candidate, victims in spots:
            if not claimed.isdisjoint(candidate.gpus):
                continue
            if not victims:
                return candidate, []
            if fallback is None and not self._overdrawn(victims, spent):
                fallback = (candidate, victims)
        if fallback is not None:
            for victim in fallback[1]:
                spent[victim.pipeline_id] = spent.get(victim.pipeline_id, 0) + len(victim.gpus)
        return fallback

    def _excess(self, pipeline: PipelineState) -> int:
        """GPUs `pipeline` may give away by a rebalance: what it holds above its target."""
        if not is_donor(self.sched, pipeline, self.any_donor):
            return 0
        return pipeline.num_active_gpus - self.sched.targets.get(pipeline.pipeline_id, 0)

    def _overdrawn(self, victims: list[Rank], spent: dict[str, int]) -> bool:
        """Whether taking `victims` (on top of `spent`) takes a donor below its target."""
        loss: dict[str, int] = {}
        for victim in victims:
            loss[victim.pipeline_id] = loss.get(victim.pipeline_id, 0) + len(victim.gpus)
        pipelines = self.sched.pipelines
        return any(lost + spent.get(pid, 0) > self._excess(pipelines[pid]) for pid, lost in loss.items())

    def _overlapping(self, slot: int) -> set[int]:
        cluster = self.sched.cluster
        cache = cluster.overlap_cache
        found = cache.get(slot)
        if found is None:
            found = {s for g in cluster.slot_gpus[slot] for s in cluster.slots_by_gpu[g]}
            cache[slot] = found
        return found

    def _victims(self, gpus: tuple[int, ...], receiver: str, owners: set[str]) -> list[Rank] | None:
        """The active ranks on `gpus`, or None if a GPU is lost, held by anything else, or by a
        rank of a pipeline not in `owners` (or of the receiver), or backing off a failed shrink."""
        cluster = self.sched.cluster
        now = self.sched.now
        victims: dict[int, Rank] = {}
        for gpu in gpus:
            holder = cluster.owner[gpu]
            if holder is None:
                if gpu in cluster.offline:
                    return None
                continue
            if type(holder) is not Rank or holder.status is not RANK_ACTIVE:
                return None
            if holder.pipeline_id not in owners or holder.pipeline_id == receiver:
                return None
            if holder.shrink_retry_after_s > now:
                return None
            victims[id(holder)] = holder
        return list(victims.values())


def _idle_first(donor: PipelineState) -> Iterable[Rank]:
    """A donor's active ranks, those running fewer trajectories first (by its last report):
    taking an idle rank re-queues nothing. In its tail, if it is held there (`tail_held`:
    rlix.policy.finish may release it), the busy ones are kept (not taken), so only the idle
    ones come, in their order; otherwise the busy ones follow, fewest first (the
    stable sort by count, without sorting the idle ones: donor_fit runs once per rank moved).
    Only with a report (`in_flight`), which `busy` then matches."""
    cached = donor.donor_order_cache
    if cached is not None:
        return cached
    in_flight = donor.in_flight or {}
    busy = donor.busy
    order = [rank for n, rank in donor.active.items() if n not in busy]
    if busy and not donor.held_in_tail:
        running = [rank for n, rank in donor.active.items() if n in busy]
        order += sorted(running, key=lambda rank: in_flight[rank.dp_rank])
    donor.donor_order_cache = order
    return order


def _kept(rank: Rank, sched: Scheduler) -> bool:
    """A busy rank of a pipeline held in its tail: a rebalance does not cut it (keep_busy_tail)."""
    pipeline = sched.pipelines[rank.pipeline_id]
    return pipeline.held_in_tail and rank.dp_rank in pipeline.busy
