"""The ledger's fast paths do exactly what the general paths they shortcut do.

`Ledger.hand_over` (a rebalance that takes exactly one donor rank's bundle) must emit the
decisions and leave the state that `shrink` then `expand` would; `Ledger.expand` on a bundle no
other slot overlaps (ClusterState.take's fast path inlined, `requires` read from one GPU) must
do what its general path does. Each is checked on copies of the same random states, some with
shrinks in flight (GPUs releasing, for the `requires`), the general path being the reference.
"""

from __future__ import annotations

import copy
import random
from typing import Any

from rlix.policy import (
    ClusterRequested,
    ClusterSpec,
    PipelineAdmitted,
    PipelineKind,
    PipelineRegistered,
    PipelineSpec,
    Scheduler,
    Topology,
)
from rlix.policy.state import Rank, RankStatus
from tests.policy.digest import digest

NUM_STATES = 60


def random_state(seed: int) -> Scheduler:
    """Pipelines on aligned TP bundles, ranks active at random, some shrinks and expands in
    flight (set up through the ledger directly, as bench/planning.py does)."""
    rng = random.Random(seed)
    topology = Topology(rng.randint(1, 2), 8)
    sched = Scheduler(topology)
    shared_tp = rng.choice([1, 2, 4])  # mostly one TP size, so ranks of several share a slot
    for i in range(rng.randint(2, 4)):
        tp = shared_tp if rng.random() < 0.8 else rng.choice([1, 2, 4])
        bundles = [tuple(range(start, start + tp)) for start in range(0, topology.num_gpus, tp)]
        chosen = sorted(rng.sample(bundles, rng.randint(1, len(bundles))))
        spec = PipelineSpec(f"p{i}", PipelineKind.FULL_FINETUNE,
                            {"actor_infer": ClusterSpec(tp, tuple(g for b in chosen for g in b))})
        sched.handle(PipelineRegistered(0.0, spec))
        sched.handle(PipelineAdmitted(0.0, spec.pipeline_id))
        sched.handle(ClusterRequested(0.0, spec.pipeline_id, "actor_infer", 6, estimate=0.0))
    ledger = sched.ledger
    assert not ledger.inflight  # no work reported yet, so no round started a rank
    ranks = [r for p in sched.pipelines.values() for r in p.ranks]
    rng.shuffle(ranks)
    for rank in ranks:
        if _free(sched, rank) and rng.random() < 0.7:
            ledger.applied(ledger.expand(rank).decision_id)
    for rank in ranks:  # shrinks in flight, and expands onto their GPUs requiring them
        if rank.status is RankStatus.ACTIVE and rng.random() < 0.3:
            ledger.shrink(rank, "rebalance")
    for rank in ranks:
        if rank.status is RankStatus.INACTIVE and _free(sched, rank) and rng.random() < 0.3:
            ledger.expand(rank)
    ledger.take_output()
    return sched


def _free(sched: Scheduler, rank: Rank) -> bool:
    return all(sched.cluster.is_free(g) for g in rank.gpus)


def snapshot(sched: Scheduler, decisions: list[Any]) -> dict[str, Any]:
    ledger = sched.ledger
    return {
        "digest": digest(sched),
        "decisions": [repr(d) for d in decisions],
        "inflight": {i: repr(d) for i, (d, _holder) in ledger.inflight.items()},
        "dependents": dict(ledger.dependents),
        "slots": (list(sched.cluster.slot_num_busy), sched.cluster.free_bits),
    }


def _rank_at(sched: Scheduler, rank: Rank) -> Rank:
    return sched.pipelines[rank.pipeline_id].ranks[rank.dp_rank]


def test_hand_over_equals_shrink_then_expand() -> None:
    checked = 0
    for seed in range(NUM_STATES):
        base = random_state(seed)
        for victim in [r for p in base.pipelines.values() for r in p.active.values()]:
            if victim.status is not RankStatus.ACTIVE:
                continue
            for pipeline in base.pipelines.values():
                rank = pipeline.rank_by_slot.get(victim.slot)
                if rank is None or rank.status is not RankStatus.INACTIVE:
                    continue
                fast, general = copy.deepcopy(base), copy.deepcopy(base)
                fast.ledger.hand_over(_rank_at(fast, victim), _rank_at(fast, rank))
                general.ledger.shrink(_rank_at(general, victim), "rebalance")
                general.ledger.expand(_rank_at(general, rank))
                assert snapshot(fast, fast.ledger.take_output()) == snapshot(general, general.ledger.take_output())
                checked += 1
    assert checked > 100


def test_expand_fast_path_equals_general_path() -> None:
    checked = releasing = 0
    for seed in range(NUM_STATES):
        base = random_state(seed)
        for pipeline in base.pipelines.values():
            for rank in pipeline.ranks:
                if rank.status is not RankStatus.INACTIVE or not _free(base, rank):
                    continue
                fast, general = copy.deepcopy(base), copy.deepcopy(base)
                fast.ledger.expand(_rank_at(fast, rank))
                # Marking the slot as overlapping others sends expand down its general path
                # (ClusterState.take's own loop, Ledger._requires) without changing its result.
                general.cluster.partial_overlap.add(rank.slot)
                general.ledger.expand(_rank_at(general, rank))
                general.cluster.partial_overlap.discard(rank.slot)
                assert snapshot(fast, fast.ledger.take_output()) == snapshot(general, general.ledger.take_output())
                checked += 1
                releasing += any(g in base.cluster.releasing_by for g in rank.gpus)
    assert checked > 100 and releasing > 10
