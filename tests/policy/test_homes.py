"""Placing sized homes (rlix.policy.homes), checked against what the rule promises, computed
here by brute force over the pool's chunks rather than through the placement code."""

from __future__ import annotations

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from rlix.policy import ClusterSpec, PipelineKind, PipelineSpec, Topology
from rlix.policy.homes import (
    choose_home,
    choose_shared_home,
    max_placeable,
    placement_unit,
    pool_rest,
    resolve,
)


@st.composite
def pools(draw: st.DrawFn) -> tuple[Topology, int, set[int], list[int], int]:
    topology = Topology(draw(st.integers(1, 4)), draw(st.sampled_from([2, 4, 6, 8])))
    unit = draw(st.sampled_from([u for u in (1, 2, 4) if topology.gpus_per_node % u == 0]))
    usable = set(draw(st.sets(st.integers(0, topology.num_gpus - 1))))
    load = draw(st.lists(st.integers(0, 3), min_size=topology.num_gpus, max_size=topology.num_gpus))
    size = unit * draw(st.integers(1, topology.num_gpus // unit))
    return topology, unit, usable, load, size


def _aligned_chunks(topology: Topology, unit: int, usable: set[int]) -> list[tuple[int, ...]]:
    chunks = []
    for start in range(0, topology.num_gpus, unit):
        chunk = tuple(range(start, start + unit))
        if topology.node_of(chunk[0]) == topology.node_of(chunk[-1]) and set(chunk) <= usable:
            chunks.append(chunk)
    return chunks


@settings(max_examples=300, deadline=None)
@given(pools())
def test_a_home_is_found_exactly_when_enough_whole_chunks_are_usable(case: tuple) -> None:
    topology, unit, usable, load, size = case
    home = choose_home(size, unit, usable, topology, load.__getitem__)
    chunks = _aligned_chunks(topology, unit, usable)
    if len(chunks) * unit < size:
        assert home is None
        return
    assert home is not None
    assert len(home) == size == len(set(home))
    assert set(home) <= usable
    # every part of it is whole aligned chunks inside one node
    for start in range(0, topology.num_gpus, unit):
        part = set(range(start, start + unit)) & set(home)
        assert not part or len(part) == unit


@settings(max_examples=300, deadline=None)
@given(pools())
def test_whole_nodes_first_and_least_loaded(case: tuple) -> None:
    topology, unit, usable, load, size = case
    home = choose_home(size, unit, usable, topology, load.__getitem__)
    if home is None:
        return
    per_node = topology.gpus_per_node
    nodes = range(topology.num_nodes)
    whole_usable = [n for n in nodes if set(range(n * per_node, (n + 1) * per_node)) <= usable]
    whole_in_home = [n for n in nodes if set(range(n * per_node, (n + 1) * per_node)) <= set(home)]
    wanted = min(size // per_node, len(whole_usable))
    assert len(whole_in_home) >= wanted
    if wanted:
        def node_load(n: int) -> int:
            return sum(load[n * per_node : (n + 1) * per_node])

        best = min(sum(node_load(n) for n in combo) for combo in itertools.combinations(whole_usable, wanted))
        chosen = sorted(whole_in_home, key=lambda n: (node_load(n), n))[:wanted]
        assert sum(node_load(n) for n in chosen) == best


def test_first_fit_without_load() -> None:
    topology = Topology(3, 4)
    assert choose_home(8, 2, set(range(12)), topology) == tuple(range(8))
    assert choose_home(4, 2, set(range(2, 12)), topology) == (4, 5, 6, 7)  # a whole node first
    assert choose_home(2, 2, {0, 1, 2, 3, 5, 6, 7, 9}, topology) == (0, 1)
    assert choose_home(6, 2, set(range(4, 10)), topology) == (4, 5, 6, 7, 8, 9)
    assert choose_home(3, 2, set(range(12)), topology) is None  # not whole bundles
    assert choose_home(2, 2, {1, 2}, topology) is None  # 1-2 is not an aligned bundle


def test_least_loaded_nodes_first() -> None:
    topology = Topology(3, 4)
    load = [1] * 4 + [2] * 4 + [0] * 4
    assert choose_home(8, 1, set(range(12)), topology, load.__getitem__) == (0, 1, 2, 3, 8, 9, 10, 11)
    assert choose_home(2, 1, set(range(12)), topology, load.__getitem__) == (8, 9)


def _spec(home_size: int, train_tp: int = 1, infer_tp: int = 2) -> PipelineSpec:
    return PipelineSpec(
        "p", PipelineKind.FULL_FINETUNE,
        {"actor_train": ClusterSpec(train_tp, (), "home"), "actor_infer": ClusterSpec(infer_tp, (), "pool")},
        home_size=home_size,
    )


def test_resolve_maps_home_then_pool_in_whole_bundles() -> None:
    topology = Topology(3, 4)
    spec = _spec(4)
    assert not spec.placed and spec.footprint == frozenset()
    spec.validate(topology)
    placed = resolve(spec, (6, 7, 4, 5), topology)
    placed.validate(topology)
    assert placed.placed and placed.home == (4, 5, 6, 7) and placed.home_size == 4
    assert placed.clusters["actor_train"].mapping == (4, 5, 6, 7)
    assert placed.clusters["actor_infer"].mapping == (4, 5, 6, 7, 0, 1, 2, 3, 8, 9, 10, 11)
    confined = resolve(spec, (4, 5, 6, 7), topology, confine=True)
    assert confined.clusters["actor_infer"].mapping == (4, 5, 6, 7)


def test_pool_rest_leaves_out_a_node_remainder() -> None:
    topology = Topology(2, 6)
    assert pool_rest((0, 1, 2, 3), 4, topology) == (6, 7, 8, 9)
    assert placement_unit(_spec(4, train_tp=2, infer_tp=3)) == 6
    assert max_placeable(4, topology) == 8


def test_an_unplaced_spec_must_be_a_size() -> None:
    import pytest

    from rlix.policy import SpecError

    topology = Topology(1, 4)
    with pytest.raises(SpecError, match="home"):
        PipelineSpec("p", PipelineKind.FULL_FINETUNE,
                     {"actor_infer": ClusterSpec(1, (), "pool")}).validate(topology)
    with pytest.raises(SpecError, match="home_size"):
        _spec(8).validate(topology)
    with pytest.raises(SpecError, match="scope"):
        ClusterSpec(1, (), "house").validate("x", topology)


@st.composite
def shared_pools(draw: st.DrawFn) -> tuple[Topology, int, set[int], list[tuple[int, ...]], int]:
    """A pool with some homes already placed (any GPUs, sorted, of a few sizes), and a size."""
    topology = Topology(draw(st.integers(1, 4)), draw(st.sampled_from([2, 4, 8])))
    unit = draw(st.sampled_from([u for u in (1, 2, 4) if topology.gpus_per_node % u == 0]))
    usable = set(draw(st.sets(st.integers(0, topology.num_gpus - 1))))
    size = unit * draw(st.integers(1, topology.num_gpus // unit))
    # mostly whole aligned chunks (the homes placement makes), some any GPUs at all
    starts = st.sets(st.sampled_from(range(0, topology.num_gpus, unit)), min_size=1)
    chunked = starts.map(lambda s: tuple(sorted(g for c in s for g in range(c, c + unit))))
    loose = st.sets(st.integers(0, topology.num_gpus - 1), min_size=1).map(lambda h: tuple(sorted(h)))
    # homes of the very size asked for, so that stacks compete
    sized = st.lists(st.sampled_from(range(0, topology.num_gpus, unit)), min_size=size // unit,
                     max_size=size // unit, unique=True).map(
        lambda s: tuple(sorted(g for c in s for g in range(c, c + unit))))
    homes = draw(st.lists(st.one_of(sized, sized, chunked, loose), max_size=6))
    return topology, unit, usable, homes, size


@st.composite
def stacked_pools(draw: st.DrawFn, depth: st.SearchStrategy[int] | None = None,
                  ) -> tuple[Topology, int, set[int], list[tuple[int, ...]], int]:
    """A pool cut into aligned blocks of the size asked for, several of them homes stacked
    `depth` deep (default 0-4; each block's homes listed once per job on it), so that stacks
    compete."""
    topology = Topology(draw(st.integers(2, 4)), draw(st.sampled_from([4, 8])))
    unit = draw(st.sampled_from([1, 2]))
    size = draw(st.sampled_from([topology.gpus_per_node // 2, topology.gpus_per_node]))
    blocks = [tuple(range(start, start + size)) for start in range(0, topology.num_gpus, size)]
    depths = draw(st.lists(st.integers(0, 4) if depth is None else depth, min_size=len(blocks), max_size=len(blocks)))
    homes = [block for block, depth in zip(blocks, depths, strict=True) for _ in range(depth)]
    usable = set(range(topology.num_gpus)) - set(draw(st.sets(st.integers(0, topology.num_gpus - 1), max_size=2)))
    return topology, unit, usable, homes, size


def _is_aligned(home: tuple[int, ...], unit: int, topology: Topology) -> bool:
    chunks = {g - g % unit for g in home}
    return all(
        set(range(c, c + unit)) <= set(home) and topology.node_of(c) == topology.node_of(c + unit - 1)
        for c in chunks
    ) and len(home) == len(chunks) * unit


def _stacks(homes: list[tuple[int, ...]], size: int, usable: set[int], unit: int,
            topology: Topology) -> list[tuple[int, ...]]:
    """Rule 2's stacks, by brute force: homes of the size on usable GPUs, aligned, that no other
    home crosses (shares GPUs with, neither inside the other)."""
    return [h for h in homes if len(h) == size and set(h) <= usable and _is_aligned(h, unit, topology)
            and not any(set(h) & set(o) and set(h) - set(o) and set(o) - set(h) for o in homes)]


@settings(max_examples=400, deadline=None)
@given(shared_pools())
def test_shared_home_own_gpus_first_then_stacked_where_no_home_crosses(case: tuple) -> None:
    topology, unit, usable, homes, size = case
    load = [sum(g in h for h in homes) for g in range(topology.num_gpus)]
    home = choose_shared_home(size, unit, usable, topology, load, set(homes))
    uncovered = {g for g in usable if not load[g]}
    if len(_aligned_chunks(topology, unit, uncovered)) * unit >= size:
        # rule 1: GPUs no home covers hold it, so it takes only those
        assert home is not None and set(home) <= uncovered and len(home) == size
        return

    stacks = _stacks(homes, size, usable, unit, topology)
    if stacks:
        # rule 2: exactly an existing home that crosses none, none of the others less covered
        assert home in stacks
        assert max(load[g] for g in home) == min(max(load[g] for g in h) for h in stacks)
        return
    # rule 3: the least covered by choose_home's rule
    assert home == choose_home(size, unit, usable, topology, load.__getitem__)


@settings(max_examples=300, deadline=None)
@given(st.one_of(shared_pools(), stacked_pools()), st.lists(st.floats(0, 3, allow_nan=False), min_size=8, max_size=8))
def test_stacks_go_least_unlike_first(case: tuple, distances: list[float]) -> None:
    """With `unlike`, rule 2 takes, of the stacks it allows, those least unlike the new job (to
    0.1) and of those the least covered; rules 1 and 3 do not change."""
    topology, unit, usable, homes, size = case
    load = [sum(g in h for h in homes) for g in range(topology.num_gpus)]
    distance = {h: distances[i] for i, h in enumerate(dict.fromkeys(homes))}
    home = choose_shared_home(size, unit, usable, topology, load, set(homes), distance.__getitem__)
    plain = choose_shared_home(size, unit, usable, topology, load, set(homes))
    uncovered = {g for g in usable if not load[g]}
    if len(_aligned_chunks(topology, unit, uncovered)) * unit >= size:
        assert home == plain  # rule 1 is not about stacks
        return
    stacks = _stacks(homes, size, usable, unit, topology)
    if not stacks:
        assert home == plain  # rule 3 neither
        return
    best = min(round(distance[h], 1) for h in stacks)
    alike = [h for h in stacks if round(distance[h], 1) == best]
    assert home in alike
    assert max(load[g] for g in home) == min(max(load[g] for g in h) for h in alike)


@settings(max_examples=300, deadline=None)
@given(st.one_of(shared_pools(), stacked_pools(), stacked_pools(st.sampled_from([0, 0, 3]))),  # deep stacks, empty blocks
       st.lists(st.sampled_from([0.0, 0.04, 0.5, 2.0]), min_size=8, max_size=8),
       st.integers(0, 4), st.sampled_from([0.0, 0.5, 1.0, 2.5, 1e9]))
def test_alike_stacks_come_first_once_homes_must_overlap(case: tuple, distances: list[float], depth: int,
                                                        reserve_homes: float) -> None:
    """Rule 0: when the homes and the new one cover more GPUs than the pool has, and the GPUs
    no home covers, less the new home, hold fewer than `reserve_homes` homes of its size, a stack of
    alike jobs (distance rounding to 0) holding fewer than `depth` homes is taken, the least
    covered, before anything else; otherwise rules 1-3 as without it."""
    topology, unit, usable, homes, size = case
    load = [sum(g in h for h in homes) for g in range(topology.num_gpus)]
    distance = {h: distances[i] for i, h in enumerate(dict.fromkeys(homes))}
    home = choose_shared_home(size, unit, usable, topology, load, set(homes), distance.__getitem__, depth,
                              reserve_homes=reserve_homes)
    without = choose_shared_home(size, unit, usable, topology, load, set(homes), distance.__getitem__)
    stacks = _stacks(homes, size, usable, unit, topology)
    alike = [h for h in stacks if distance[h] < 0.05 and max(load[g] for g in h) < depth]
    num_uncovered = sum(1 for g in usable if all(g not in h for h in homes))
    short_of_reserve = (num_uncovered - size) / size < reserve_homes  # counted in homes of the size
    if depth and sum(load) + size > len(usable) and alike and short_of_reserve:
        assert home in alike
        assert max(load[g] for g in home) == min(max(load[g] for g in h) for h in alike)
    else:
        assert home == without


@settings(max_examples=300, deadline=None)
@given(st.one_of(shared_pools(), stacked_pools(), stacked_pools()),
       st.lists(st.sampled_from([0.0, 0.04, 0.5, 2.0]), min_size=8, max_size=8),
       st.lists(st.sampled_from([0.0, 0.03, 0.3, 0.34, 1.0, math.inf]), min_size=8, max_size=8),
       st.integers(0, 4))
def test_stacks_whose_jobs_leave_together_come_first(
    case: tuple, distances: list[float], departures: list[float], depth: int
) -> None:
    """Leave together (`apart`): of the stacks rule 0 or rule 2 would choose among (alike to
    the same 0.1, and under rule 0 below the depth and at most one home deeper than the
    shallowest such stack), those whose jobs' departures are closest to the new job's (to 0.1)
    come first, then the least covered; where neither rule applies the placement is as without
    it."""
    topology, unit, usable, homes, size = case
    load = [sum(g in h for h in homes) for g in range(topology.num_gpus)]  # a stacked home once per job
    distance = {h: distances[i] for i, h in enumerate(dict.fromkeys(homes))}
    departure = {h: departures[i] for i, h in enumerate(dict.fromkeys(homes))}
    home = choose_shared_home(size, unit, usable, topology, load, set(homes), distance.__getitem__, depth,
                              departure.__getitem__)
    without = choose_shared_home(size, unit, usable, topology, load, set(homes), distance.__getitem__, depth)
    stacks = _stacks(homes, size, usable, unit, topology)
    covered = {h: max(load[g] for g in h) for h in stacks}
    alike = [h for h in stacks if distance[h] < 0.05 and covered[h] < depth]
    uncovered = {g for g in usable if not load[g]}
    if depth and sum(load) + size > len(usable) and alike:
        shallowest = min(covered[h] for h in alike)
        candidates = [h for h in alike if covered[h] - shallowest < 2]  # rule 0
    elif len(_aligned_chunks(topology, unit, uncovered)) * unit < size and stacks:
        nearest = min(round(distance[h], 1) for h in stacks)
        candidates = [h for h in stacks if round(distance[h], 1) == nearest]  # rule 2
    else:
        assert home == without  # rules 1 and 3 are not about stacks
        return
    soonest = min(round(departure[h], 1) for h in candidates)
    together = [h for h in candidates if round(departure[h], 1) == soonest]
    assert home in together
    assert covered[home] == min(covered[h] for h in together)


def test_alike_first_seeks_leaving_together_near_the_shallowest_stack() -> None:
    """Node 0 holds three alike jobs that leave when the new one would, node 1 one alike job
    that leaves long before; nodes 2 and 3 hold unlike jobs. Rule 0 joins node 1: node 0 is two
    homes deeper than the shallowest alike stack. With node 0 one home shallower, it joins
    node 0, the stack that empties with it."""
    topology = Topology(4, 4)
    nodes = [tuple(range(4 * n, 4 * n + 4)) for n in range(4)]
    alike = {nodes[0]: 0.0, nodes[1]: 0.0, nodes[2]: 2.0, nodes[3]: 2.0}
    departure = {nodes[0]: 0.0, nodes[1]: 1.0, nodes[2]: 0.0, nodes[3]: 0.0}
    for depth_0, chosen in ((3, nodes[1]), (2, nodes[0])):
        load = [depth_0] * 4 + [1] * 12
        assert choose_shared_home(4, 1, set(range(16)), topology, load, set(nodes), alike.__getitem__, 4,
                                  departure.__getitem__) == chosen


def test_alike_first_only_once_homes_cannot_all_be_disjoint() -> None:
    topology = Topology(4, 4)
    homes = {(0, 1, 2, 3)}
    load = [1] * 4 + [0] * 12
    alike = lambda h: 0.0  # noqa: E731
    # 4 + 4 GPUs of homes on 16: room for both, so the new job gets GPUs of its own
    assert choose_shared_home(4, 1, set(range(16)), topology, load, homes, alike, 4) == (4, 5, 6, 7)
    # with three more homes placed elsewhere, 16 + 4 > 16: it joins its kind's stack
    homes |= {(4, 5, 6, 7), (8, 9, 10, 11)}
    load = [1] * 12 + [0] * 4
    unlike_elsewhere = {(0, 1, 2, 3): 0.0, (4, 5, 6, 7): 1.0, (8, 9, 10, 11): 1.0}
    assert choose_shared_home(4, 1, set(range(16)), topology, load, homes, unlike_elsewhere.__getitem__, 4) \
        == (12, 13, 14, 15)  # 12 + 4 = 16: still room
    load[0:4] = [3] * 4
    assert choose_shared_home(4, 1, set(range(16)), topology, load, homes, unlike_elsewhere.__getitem__, 4) \
        == (0, 1, 2, 3)  # 20 + 4 > 16: with its kind (3 homes deep, under the depth of 4)
    load[0:4] = [4] * 4
    assert choose_shared_home(4, 1, set(range(16)), topology, load, homes, unlike_elsewhere.__getitem__, 4) \
        == (12, 13, 14, 15)  # that stack is full: GPUs of its own after all


def test_alike_first_yields_to_gpus_no_home_covers_past_the_reserve() -> None:
    """Rule 0 keeps a new home off GPUs no home covers only while they are scarce: with 12 of
    16 uncovered, a 4-GPU home leaves 8 (two more homes of its size), so it takes them at a
    reserve of two homes or less, and joins its kind above."""
    topology = Topology(4, 4)
    homes = {(0, 1, 2, 3)}
    load = [5] * 4 + [0] * 12  # 20 + 4 > 16: the homes cannot all be disjoint
    alike = lambda h: 0.0  # noqa: E731
    for reserve_homes, home in ((0.0, (4, 5, 6, 7)), (2.0, (4, 5, 6, 7)), (2.5, (0, 1, 2, 3)), (1e9, (0, 1, 2, 3))):
        assert choose_shared_home(4, 1, set(range(16)), topology, load, homes, alike, 6,
                                  reserve_homes=reserve_homes) == home


def test_a_long_job_stacks_with_long_ones_though_a_short_stack_is_less_covered() -> None:
    topology = Topology(2, 4)
    homes = {(0, 1, 2, 3), (4, 5, 6, 7)}
    load = [2] * 4 + [1] * 4  # two long jobs on node 0, one short job on node 1
    runtime_s = {(0, 1, 2, 3): 1000.0, (4, 5, 6, 7): 10.0}

    def unlike(mine: float) -> object:
        return lambda h: abs(math.log(runtime_s[h] / mine))

    assert choose_shared_home(4, 1, set(range(8)), topology, load, homes) == (4, 5, 6, 7)
    assert choose_shared_home(4, 1, set(range(8)), topology, load, homes, unlike(900.0)) == (0, 1, 2, 3)
    assert choose_shared_home(4, 1, set(range(8)), topology, load, homes, unlike(12.0)) == (4, 5, 6, 7)


def test_four_homes_of_8_on_12_gpus_stack() -> None:
    """RLix's shape: the first home takes two whole nodes, the other three stack on it (spread,
    they would lie on three different pairs of nodes and every gang would preempt rollout)."""
    topology = Topology(3, 4)
    load = [0] * 12
    placed: list[tuple[int, ...]] = []
    for _ in range(4):
        home = choose_shared_home(8, 1, set(range(12)), topology, load, set(placed))
        assert home is not None
        placed.append(home)
        for g in home:
            load[g] += 1
    assert placed == [tuple(range(8))] * 4
    homes = set(placed)
    # a smaller home still finds the GPUs nobody's home covers
    assert choose_shared_home(4, 2, set(range(12)), topology, load, homes) == (8, 9, 10, 11)
    # of the homes of the size, the least covered (ties: the lowest GPU ids)
    load = [2] * 4 + [1] * 4 + [1] * 4
    homes = {(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11)}
    assert choose_shared_home(4, 1, set(range(12)), topology, load, homes) == (4, 5, 6, 7)
    # a size no home has: least covered
    assert choose_shared_home(12, 1, set(range(12)), topology, load, homes) == tuple(range(12))
    # cpu-queue: homes 0-1 and 1-2 cross; a stack on either would conflict with both, the least
    # covered GPUs, 0 and 3, with one
    topology = Topology(1, 4)
    load = [1, 2, 1, 0]
    assert choose_shared_home(2, 1, set(range(4)), topology, load, {(0, 1), (1, 2)}) == (0, 3)
