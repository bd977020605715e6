"""Spec builders and hypothesis strategies shared by the policy tests."""

from __future__ import annotations

from hypothesis import strategies as st

from rlix.policy import ClusterSpec, PipelineKind, PipelineSpec, Topology


def full_finetune(
    pipeline_id: str,
    rollout: tuple[int, ...],
    train: tuple[int, ...],
    tp: int = 1,
    max_staleness: int = 0,
    **extra: ClusterSpec,
) -> PipelineSpec:
    clusters = {"actor_infer": ClusterSpec(tp, rollout), "actor_train": ClusterSpec(1, train), **extra}
    return PipelineSpec(pipeline_id, PipelineKind.FULL_FINETUNE, clusters, max_staleness=max_staleness)


def multi_lora(
    pipeline_id: str,
    rollout: tuple[int, ...],
    train: tuple[int, ...],
    adapters: tuple[str, ...] = ("a0", "a1"),
    tp: int = 1,
    max_staleness: int | dict[str, int] = 0,
) -> PipelineSpec:
    clusters = {"actor_infer": ClusterSpec(tp, rollout), "actor_train": ClusterSpec(1, train)}
    return PipelineSpec(pipeline_id, PipelineKind.MULTI_LORA, clusters, adapters, max_staleness)


@st.composite
def topologies(draw: st.DrawFn, max_nodes: int = 2) -> Topology:
    return Topology(draw(st.integers(1, max_nodes)), draw(st.sampled_from([2, 4, 8])))


@st.composite
def rollout_mappings(draw: st.DrawFn, topology: Topology) -> tuple[int, tuple[int, ...]]:
    """A TP size and a valid rollout mapping, sometimes offset so bundles overlap others'."""
    gpn = topology.gpus_per_node
    tp = draw(st.sampled_from([t for t in (1, 2, 4) if t <= gpn]))
    offset = draw(st.integers(0, min(tp - 1, gpn - tp))) if draw(st.booleans()) else 0
    bundles = [
        tuple(range(node * gpn + start, node * gpn + start + tp))
        for node in range(topology.num_nodes)
        for start in range(offset, gpn - tp + 1, tp)
    ]
    chosen = draw(st.lists(st.sampled_from(bundles), min_size=1, max_size=len(bundles), unique=True))
    return tp, tuple(g for bundle in chosen for g in bundle)


@st.composite
def gang_mappings(draw: st.DrawFn, topology: Topology) -> tuple[int, ...]:
    gpus = draw(st.lists(st.integers(0, topology.num_gpus - 1), min_size=1, max_size=topology.num_gpus, unique=True))
    return tuple(sorted(gpus))


@st.composite
def pipeline_specs(draw: st.DrawFn, topology: Topology, pipeline_id: str, homes: bool = False) -> PipelineSpec:
    """A random pipeline; with `homes`, half of them with a home among their training GPUs
    (the homes the look-ahead keeps for pipelines away between steps), and half of them on
    an engine that migrates running trajectories (whose tails may spread)."""
    tp, rollout = draw(rollout_mappings(topology))
    clusters = {
        "actor_infer": ClusterSpec(tp, rollout),
        "actor_train": ClusterSpec(1, draw(gang_mappings(topology))),
    }
    if draw(st.booleans()):
        clusters["critic"] = ClusterSpec(1, draw(gang_mappings(topology)))
    if draw(st.booleans()):
        clusters["reference"] = ClusterSpec(1, draw(gang_mappings(topology)))
    staleness = draw(st.integers(0, 2))
    weight = draw(st.sampled_from([1.0, 1.0, 2.0, 0.5]))
    home: tuple[int, ...] = ()
    if homes and draw(st.booleans()):  # a small part of its training GPUs, so homes overlap little
        train = clusters["actor_train"].mapping
        home = tuple(sorted(draw(st.sets(st.sampled_from(train), min_size=1, max_size=min(2, len(train))))))
    migrates = homes and draw(st.booleans())
    # A step count most of the time (the finish projection of rlix.policy.finish), at times
    # fewer steps than the machine will train: a pipeline past its count has no time left.
    num_steps = draw(st.one_of(st.none(), st.integers(1, 8), st.integers(1, 8)))
    if draw(st.booleans()):
        adapters = tuple(f"a{i}" for i in range(draw(st.integers(1, 3))))
        steps = None if num_steps is None else {a: draw(st.integers(1, 8)) for a in adapters}
        return PipelineSpec(pipeline_id, PipelineKind.MULTI_LORA, clusters, adapters, staleness, weight, home=home,
                            rollout_migrates=migrates, num_steps=steps)
    return PipelineSpec(pipeline_id, PipelineKind.FULL_FINETUNE, clusters, (), staleness, weight, home=home,
                        rollout_migrates=migrates, num_steps=num_steps)
