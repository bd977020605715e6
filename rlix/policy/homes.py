"""Homes: the GPUs a pipeline would own without sharing, and placing a home given as a size.

A pipeline's home is either explicit GPU ids (which may overlap other pipelines' homes: a lab's
pool holds more experiments than partitions) or a size, which the core places when the policy
lets the pipeline in. Clusters may follow the home (`scope` "home": the home's GPUs) or the pool
(`scope` "pool": the home's GPUs first, then every other GPU of the pool, in whole TP bundles
per node), so a rollout that may spread over the pool still starts on its own GPUs (rank 0 is
the home's first bundle).

Placement, the rule every policy uses (it differs only in which GPUs it offers and what it
counts as load):

1. A home is cut into *chunks*: aligned runs of `unit` GPUs inside one node, `unit` being the
   least common multiple of the TP sizes of the clusters that follow the home (so every TP
   bundle of every such cluster lies inside one node).
2. Whole nodes first: as many whole free nodes as the size holds, least loaded first, then by
   node id.
3. The rest from one node if one can hold it (least loaded, then node id), its chunks least
   loaded first, then in GPU order; else chunk by chunk over the other nodes in that order.

`load` is what a policy wants to avoid. The queueing policies (static, static-backfill,
sequential) offer only free GPUs and count no load, which is plain first-fit. The admit-at-once
policies (rlix, gap-ratio) place a home by `choose_shared_home`, counting the homes already
placed on each GPU:

1. On GPUs no home covers, first fit, if they hold it: a home of its own.
2. Else exactly on an existing home of the same size whose chunks suit it and that crosses no
   other home (every home it meets lies inside it or holds it), the one the fewest homes cover,
   then the lowest GPU ids: *stack, do not straddle*. Given `unlike` (rlix's
   `stack_by_runtime`), the stacks whose jobs are most like the new one come first (see
   below). A home that must overlap others
   serialises its training with theirs whatever GPUs it takes; laid across parts of several
   homes it conflicts with each of them, and every turn of training gangs moves to another set
   of GPUs, preempting the rollout ranks that had settled there. Stacked, the jobs take turns on
   the same GPUs and the GPUs outside keep their rollout ranks. On RLix's shape (`blog-4on12`:
   four 8-GPU homes on 12 GPUs) spreading put the homes on three different pairs of nodes;
   stacked, the third node is never preempted by a gang. A home that already crosses another
   is no place to stack: on `cpu-queue` (homes 0-1 and 1-2 on 4 GPUs) a 2-GPU home on 0-1
   would conflict with both, on 0 and 3 with one.
3. Else the least covered GPUs by the rule above.

*Like with like* (`unlike`, how unlike the jobs already on a home are to the new one; rlix
passes the log ratio of their mean expected runtimes, `PipelineSpec.runtime_estimate_s`): a
job's rollout runs on its home first, and every job stacked there preempts it with each of its
training gangs. Long jobs stacked with long ones see few gangs, and their long trajectories,
the costliest to preempt, run undisturbed; short jobs stacked with short ones preempt each other
often, but lose little each time, as Slurm sites give short and long jobs their own
partitions. Stacks are taken least unlike first (to 0.1), then as in rule 2; a stack holding a
job whose runtime nobody estimated is infinitely unlike (nothing says it is short or long). On `lab-day`
(seeds 0-5) it cut rlix's mean JCT from 1,342 s to 1,293 s; the RLix model on the same
placement got slower (1,458 -> 1,526 s, seeds 0-2), so it is rlix's alone.

0. *Alike first, once homes must overlap* (`alike_depth`, rlix's `alike_stack_depth`): when the
   homes placed and this one cover more GPUs than the pool has (they cannot all be disjoint),
   a home goes exactly on a stack of alike jobs (`unlike` rounds to 0) holding fewer than
   `alike_depth` homes, the least covered, before rule 1. Taking GPUs no home covers there
   would make a new stack that jobs unlike it later have to share; joining its kind keeps the
   kinds apart, and alike jobs' gangs take turns wherever they lie once homes overlap. The
   depth bounds how many alike jobs train in turn on one stack. `lab-day` seeds 0-2 (rlix):
   1,286 -> 1,232 s at depth 4; unconditional (also while homes could all be disjoint, which
   serialises alike jobs that could have trained at once) depth 3 gave 1,242, 4 1,207, 6 1,249
   (seed 0) and no bound 2,126.
   *Up to a reserve* (`reserve_homes`, rlix's `alike_reserve_homes`): rule 0 yields to rule 1
   when the GPUs no home covers, less the new home, would still hold `reserve_homes` homes of
   its size. Uncovered GPUs run rollouts that no training gang preempts, which is what keeping
   kinds apart protects while they are scarce: on a pool of a few nodes a burst of arrivals
   takes the last of them, and the next job must then stack on jobs unlike it. On
   a pool of many, deep alike stacks leave more of it uncovered than the rollouts use, and only
   make the alike jobs' inits and training wait their turn. The reserve is counted in homes of
   the new one's size, not as a share of the pool: a share that keeps rule 0 on the 64-GPU
   `lab-day` (3 homes of 8 are 0.375 of it) kept it at 1,024 GPUs until 384 of them were
   uncovered. At 3 homes (no reserve: rule 0 whenever homes must overlap): `lab-day` (64
   GPUs, seeds 0-5) 1,169 -> 1,169 s (every 8-GPU home placed as at a share of 0.375),
   `lab-day-256` (seeds 0-3) 1,085 -> 1,046 s (a share of 0.375: 1,061), `lab-day-1024` with
   one hour of arrivals (seed 0) 1,050 -> 935 s (0.375: 995; placement by coverage alone:
   923), `lab-day-1024` (seed 0) 1,149 -> 1,011 s (0.375: 1,054; coverage alone: 986).

*Leave together* (`apart`, rlix's `stack_by_departure`): among stacks alike to the same 0.1,
those expected to empty when the new job would leave come first (rules 0 and 2), before the
fewest covered: |log| of the ratio of the time until the last of its jobs is expected to leave
(admission plus runtime estimate, less now) to the new job's runtime estimate, to 0.1. Jobs
that leave together leave their stack empty, and a later job finds GPUs no home covers or a
stack it heads with its kind. Joining the fewest covered instead pairs a new job with one about
to leave; the stack is never empty, and every job placed on it trains in turn with another.
`lab-day` (rlix, seeds 0-5): 1,205 -> 1,182 s. Under rule 0 the order is taken among the alike
stacks at most one home deeper than the shallowest of them: on a pool of many stacks a deep one
nearly always matches the new job's departure, and joining it makes the new job train in turn
with more jobs while a shallower stack of its kind has room. The last departure rather than
the mean of the jobs' (a stack is empty only once its last job leaves), and the depth window,
at seed 0 unless said: `lab-day-1024` 1,011 -> 989 s (one hour of arrivals: 935 -> 922; the
last departure alone 930, the window alone 926; placement by coverage alone 986 and 923),
`lab-day-256` (seeds 0-3) 1,046 -> 1,042 s, `lab-day` (seeds 0-5) 1,169 -> 1,173 s.

The placement is a decision (`Place`), recorded and replayed like every other.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Mapping, Sequence

from rlix.policy.specs import HOME_SCOPE, ClusterSpec, PipelineSpec, Topology


def placement_unit(spec: PipelineSpec) -> int:
    """GPUs per chunk of the spec's home: the lcm of the TP sizes of the clusters that follow it."""
    unit = 1
    for cluster in spec.clusters.values():
        if cluster.scope:
            unit = math.lcm(unit, cluster.tp)
    return unit


def max_placeable(unit: int, topology: Topology) -> int:
    """The largest home of `unit`-GPU chunks that fits an empty pool."""
    return (topology.gpus_per_node // unit) * unit * topology.num_nodes


def pool_rest(home: Collection[int], tp: int, topology: Topology) -> tuple[int, ...]:
    """Every GPU outside `home`, node by node in GPU order, in whole `tp` bundles per node (a
    node's remainder that cannot form a bundle is left out)."""
    taken = set(home)
    rest: list[int] = []
    per_node = topology.gpus_per_node
    for node in range(topology.num_nodes):
        gpus = [g for g in range(node * per_node, (node + 1) * per_node) if g not in taken]
        rest.extend(gpus[: len(gpus) - len(gpus) % tp])
    return tuple(rest)


def resolve(spec: PipelineSpec, home: Sequence[int], topology: Topology, confine: bool = False) -> PipelineSpec:
    """`spec` with its home set to `home` and every cluster with a scope mapped: "home" to the
    home's GPUs in order, "pool" to those then `pool_rest` (just the home when `confine`: a
    policy without sharing keeps a pipeline on its home)."""
    ordered = tuple(sorted(home))
    clusters: dict[str, ClusterSpec] = {}
    for name, cluster in spec.clusters.items():
        if not cluster.scope:
            clusters[name] = cluster
        elif cluster.scope == HOME_SCOPE or confine:
            clusters[name] = ClusterSpec(cluster.tp, ordered, cluster.scope)
        else:
            clusters[name] = ClusterSpec(cluster.tp, ordered + pool_rest(ordered, cluster.tp, topology), cluster.scope)
    return dataclasses.replace(spec, clusters=clusters, home=ordered, home_size=len(ordered))


def node_chunks(node: int, unit: int, topology: Topology) -> list[tuple[int, ...]]:
    """The chunks of `node` (rule 1): runs of `unit` GPUs from the node's first GPU on."""
    first = node * topology.gpus_per_node
    return [tuple(range(start, start + unit)) for start in range(first, first + topology.gpus_per_node - unit + 1, unit)]


def choose_home(
    size: int,
    unit: int,
    usable: Collection[int],
    topology: Topology,
    load: Callable[[int], float] | None = None,
) -> tuple[int, ...] | None:
    """`size` GPUs out of `usable` by the rule of the module docstring, or None if they do not
    fit. `load(gpu)` weighs each GPU (default: none, i.e. first fit)."""
    if size <= 0 or size % unit:
        return None
    per_node = topology.gpus_per_node
    weigh = load if load is not None else (lambda gpu: 0.0)
    chunks: dict[int, list[tuple[int, ...]]] = {}
    for node in range(topology.num_nodes):
        for chunk in node_chunks(node, unit, topology):
            if all(g in usable for g in chunk):
                chunks.setdefault(node, []).append(chunk)
    if sum(len(c) for c in chunks.values()) * unit < size:
        return None

    def chunk_load(chunk: tuple[int, ...]) -> float:
        return sum(weigh(g) for g in chunk)

    def node_load(node: int) -> float:
        return sum(chunk_load(c) for c in chunks[node])

    chosen: list[tuple[int, ...]] = []
    chunks_per_node = per_node // unit
    whole = sorted((n for n, c in chunks.items() if len(c) == chunks_per_node), key=lambda n: (node_load(n), n))
    used = set(whole[: size // per_node]) if per_node % unit == 0 else set()
    for node in sorted(used):
        chosen.extend(chunks[node])
    need = size // unit - len(chosen)
    if need:
        others = sorted((n for n in chunks if n not in used), key=lambda n: (node_load(n), n))
        fits = [n for n in others if len(chunks[n]) >= need]
        if fits:
            pool = sorted(chunks[fits[0]], key=lambda c: (chunk_load(c), c))
        else:
            pool = [c for n in others for c in sorted(chunks[n], key=lambda c: (chunk_load(c), c))]
        chosen.extend(pool[:need])
    return tuple(sorted(g for chunk in chosen for g in chunk))


def choose_shared_home(
    size: int,
    unit: int,
    usable: Collection[int],
    topology: Topology,
    load: Sequence[int],
    homes: Collection[tuple[int, ...]],
    unlike: Callable[[tuple[int, ...]], float] | None = None,
    alike_depth: int = 0,
    apart: Callable[[tuple[int, ...]], float] | None = None,
    reserve_homes: float = math.inf,
) -> tuple[int, ...] | None:
    """The admit-at-once policies' home of `size` GPUs (module docstring, rules 1-3): `load[g]`
    counts the homes covering GPU g, `homes` are those homes (sorted GPU ids); `unlike(home)`,
    if given, how unlike the jobs on `home` are to the new one (0: alike), which orders the
    stacks of rule 2 first, and with `alike_depth` comes rule 0, which yields to rule 1 when the
    GPUs no home covers, less the new home, would still hold `reserve_homes` homes of its size;
    `apart(home)`, if given, how far the expected departures of the jobs on `home` are from the
    new one's, which orders stacks alike that far before the fewest covered (module docstring,
    "leave together")."""
    usable = set(usable)
    # Rule 2's stacks: of the size, on usable GPUs, whole chunks, crossing no other home.
    stacks = [h for h in homes
              if len(h) == size and usable.issuperset(h) and whole_chunks(h, unit, topology) and not crosses(h, homes)]

    def covering(home: tuple[int, ...]) -> int:
        return max(load[g] for g in home)

    def likeness(home: tuple[int, ...]) -> float:
        return round(unlike(home), 1) if unlike is not None else 0.0

    def departure(home: tuple[int, ...]) -> float:
        return round(apart(home), 1) if apart is not None else 0.0

    uncovered = {g for g in usable if not load[g]}
    if (unlike is not None and alike_depth and sum(load) + size > len(usable)
            and len(uncovered) - size < reserve_homes * size):
        alike = [h for h in stacks if likeness(h) == 0 and covering(h) < alike_depth]
        if alike:
            least = min(covering(h) for h in alike)
            near = [h for h in alike if covering(h) <= least + 1]  # see "leave together"
            return min(near, key=lambda h: (departure(h), covering(h), h))
    if len(uncovered) >= size:
        home = choose_home(size, unit, uncovered, topology)
        if home is not None:
            return home
    if stacks:
        return min(stacks, key=lambda h: (likeness(h), departure(h), covering(h), h))
    return choose_home(size, unit, usable, topology, load.__getitem__)


def crosses(home: tuple[int, ...], homes: Collection[tuple[int, ...]]) -> bool:
    """Whether `home` meets one of `homes` without either holding the other."""
    mine = set(home)
    for other in homes:
        theirs = set(other)
        if not mine.isdisjoint(theirs) and not (mine <= theirs or theirs <= mine):
            return True
    return False


def whole_chunks(home: Sequence[int], unit: int, topology: Topology) -> bool:
    """Whether `home` is made of whole chunks (`node_chunks`), as `choose_home` places them."""
    gpus = set(home)
    chunks = {c for node in {topology.node_of(g) for g in gpus} for c in node_chunks(node, unit, topology)}
    return gpus == {g for c in chunks if gpus.issuperset(c) for g in c}


def with_mappings(spec: PipelineSpec, home: Sequence[int], mappings: Mapping[str, Sequence[int]]) -> PipelineSpec:
    """`spec` as a `Place` decision leaves it: `home` its home, `mappings` its clusters' new
    mappings (the clusters not named keep theirs)."""
    clusters = {
        name: ClusterSpec(c.tp, tuple(mappings[name]), c.scope) if name in mappings else c
        for name, c in spec.clusters.items()
    }
    return dataclasses.replace(spec, clusters=clusters, home=tuple(home), home_size=len(home))
