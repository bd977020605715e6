"""GPU ownership and the free-slot index: which holder has each GPU, and which TP bundles
("slots") are free, kept exact by the few methods that change them (`take`, `free`,
`set_offline`; see rlix.policy.state for the two hot paths of the ledger that inline them).
Finding a free bundle for a pipeline is then an intersection of bitsets: the free slots and
the pipeline's slots.
"""

from __future__ import annotations

from collections.abc import Iterable

from rlix.policy.specs import Topology
from rlix.policy.state import Holder, Rank


class ClusterState:
    """GPU ownership plus the free-slot index, for one topology."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        num_gpus = topology.num_gpus
        self.owner: list[Holder | None] = [None] * num_gpus
        #: How many pipelines' homes cover each GPU, and a count of changes to it.
        self.home_count = [0] * num_gpus
        self.homes_version = 0
        #: GPUs still physically held by a rank whose Shrink is in flight: gpu -> shrink id.
        self.releasing_by: dict[int, int] = {}
        self.offline: set[int] = set()
        self.num_free = num_gpus
        #: Slots sharing some GPU with a different slot (bundles not aligned to each other).
        self.partial_overlap: set[int] = set()
        self.slot_gpus: list[tuple[int, ...]] = []
        self.slot_of_bundle: dict[tuple[int, ...], int] = {}
        self.slots_by_gpu: list[list[int]] = [[] for _ in range(num_gpus)]
        #: slot -> its GPUs that are held or lost; a slot is free when this is 0.
        self.slot_num_busy: list[int] = []
        #: slot -> slots sharing a GPU with it (itself included); filled lazily.
        self.overlap_cache: dict[int, set[int]] = {}
        #: (the rollers' registration numbers, the union of their rollout mappings); see
        #: rlix.policy.rollout. Registration numbers are never reused, so a pipeline removed
        #: and registered again under its id (with another mapping) misses the cache.
        self.union_cache: tuple[frozenset[int], frozenset[int]] | None = None
        #: Bumped whenever a cluster hold (not a rollout rank) takes or frees GPUs, or a GPU is
        #: lost or restored: what rlix.policy.rollout.rollout_budget caches its exclusions by.
        self.exclusions_version = 0
        #: (the union it was computed for, exclusions_version, GPUs of the union held by
        #: cluster holds or lost); see rlix.policy.rollout.rollout_budget.
        self.excluded_cache: tuple[frozenset[int], int, frozenset[int]] | None = None
        #: The free slots, one bit per slot in an int, bits ordered by the bundles' GPU ids:
        #: intersecting it with a pipeline's `slot_bits` and taking the lowest bit finds that
        #: pipeline's free bundle with the lowest GPUs in a few C-level int operations.
        self.free_bits = 0
        self.slot_mask: list[int] = []  # slot -> 1 << its bit
        self.slot_of_bit: list[int] = []

    def count_home(self, home: tuple[int, ...], change: int) -> None:
        for gpu in home:
            self.home_count[gpu] += change
        self.homes_version += 1

    def slot_for(self, bundle: tuple[int, ...]) -> int:
        slot = self.slot_of_bundle.get(bundle)
        if slot is not None:
            return slot
        slot = len(self.slot_gpus)
        self.overlap_cache.clear()
        self.slot_gpus.append(bundle)
        self.slot_of_bundle[bundle] = slot
        busy = 0
        for gpu in bundle:
            for other in self.slots_by_gpu[gpu]:
                self.partial_overlap.update((slot, other))
            self.slots_by_gpu[gpu].append(slot)
            if self.owner[gpu] is not None or gpu in self.offline:
                busy += 1
        self.slot_num_busy.append(busy)
        self.slot_mask.append(0)  # until index_slots() places the new slot
        return slot

    def index_slots(self) -> bool:
        """Give every slot its bit, in the order of the bundles' GPU ids (after `slot_for`
        made new slots). Returns whether bits moved, in which case every pipeline's
        `slot_bits` must be rebuilt."""
        if len(self.slot_of_bit) == len(self.slot_gpus):
            return False
        self.slot_of_bit = sorted(range(len(self.slot_gpus)), key=self.slot_gpus.__getitem__)
        for bit, slot in enumerate(self.slot_of_bit):
            self.slot_mask[slot] = 1 << bit
        self.free_bits = self.bits_of(self.free_slot_ids())
        return True

    def free_slot_ids(self) -> list[int]:
        return [slot for slot, busy in enumerate(self.slot_num_busy) if busy == 0]

    def bits_of(self, slots: Iterable[int]) -> int:
        bits = 0
        for slot in slots:
            bits |= self.slot_mask[slot]
        return bits

    def is_free(self, gpu: int) -> bool:
        return self.owner[gpu] is None and gpu not in self.offline

    def _mark_busy(self, gpu: int) -> None:
        self.num_free -= 1
        busy = self.slot_num_busy
        for slot in self.slots_by_gpu[gpu]:
            if busy[slot] == 0:
                self.free_bits ^= self.slot_mask[slot]
            busy[slot] += 1

    def _mark_free(self, gpu: int) -> None:
        self.num_free += 1
        busy = self.slot_num_busy
        for slot in self.slots_by_gpu[gpu]:
            busy[slot] -= 1
            if busy[slot] == 0:
                self.free_bits |= self.slot_mask[slot]

    def take(self, gpus: tuple[int, ...], holder: Holder) -> None:
        owner = self.owner
        if type(holder) is Rank and holder.slot not in self.partial_overlap:
            # Hot path (every expansion): a bundle no other slot overlaps is free exactly when
            # its slot is, and taking it touches that slot's count alone.
            slot = holder.slot
            if self.slot_num_busy[slot]:
                raise AssertionError(f"bundle {gpus} is not free")
            for gpu in gpus:
                owner[gpu] = holder
            self.slot_num_busy[slot] = len(gpus)
            self.free_bits ^= self.slot_mask[slot]
            self.num_free -= len(gpus)
            return
        if type(holder) is not Rank:
            self.exclusions_version += 1
        for gpu in gpus:
            if owner[gpu] is not None or gpu in self.offline:
                raise AssertionError(f"GPU {gpu} is not free")
            owner[gpu] = holder
            self._mark_busy(gpu)

    def free(self, gpus: tuple[int, ...], holder: Holder) -> None:
        owner, offline = self.owner, self.offline
        if type(holder) is Rank and holder.slot not in self.partial_overlap and offline.isdisjoint(gpus):
            # Hot path (every shrink): the mirror image of take's.
            for gpu in gpus:
                assert owner[gpu] is holder, f"GPU {gpu} is not held by {holder}"
                owner[gpu] = None
            slot = holder.slot
            self.slot_num_busy[slot] = 0
            self.free_bits |= self.slot_mask[slot]
            self.num_free += len(gpus)
            return
        if type(holder) is not Rank:
            self.exclusions_version += 1
        for gpu in gpus:
            assert owner[gpu] is holder, f"GPU {gpu} is not held by {holder}"
            owner[gpu] = None
            if gpu not in offline:
                self._mark_free(gpu)

    def set_offline(self, gpu: int, offline: bool) -> None:
        self.exclusions_version += 1
        if offline and gpu not in self.offline:
            self.offline.add(gpu)
            if self.owner[gpu] is None:
                self._mark_busy(gpu)
        elif not offline and gpu in self.offline:
            self.offline.discard(gpu)
            if self.owner[gpu] is None:
                self._mark_free(gpu)
