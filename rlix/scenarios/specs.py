"""From a scenario's pipelines to the policy core's `PipelineSpec`s, per policy.

A home given as GPUs is resolved here: clusters that say `gpus: home` or `gpus: pool` get their
mappings (rlix.policy.homes.resolve). A home given as a size stays a size: the core places it
and maps those clusters then (the `Place` decision).

Every policy but the ones without sharing (`static`, `static-backfill`: the policies whose
`confines_to_home` is set) uses the clusters as the scenario writes them. Under those a
pipeline is confined to its home:

- its rollout (actor_infer) ranks are the TP bundles of the home: the home's GPUs node by node
  (nodes and GPUs in ascending order), cut into bundles of the rollout TP size;
- its other clusters are kept as written: the checks already require them to lie inside the
  home. They are not widened to the whole home, because a cluster's size sets the cost of its
  stages, and a policy comparison must change where rollout may run, not how fast training is.

So under static a pipeline's footprint is exactly its home. Homes may overlap: static then runs
the overlapping pipelines one after another (rlix.policy.queueing).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from rlix.policy import POLICIES, ROLLOUT_CLUSTER, ClusterSpec, PipelineKind, PipelineSpec, Topology
from rlix.policy.homes import resolve
from rlix.scenarios.errors import FieldProblem
from rlix.scenarios.gpusets import format_gpu_set
from rlix.scenarios.pipelines import PipelineConfig

STATIC = "static"


def confines_to_home(policy: str) -> bool:
    """Whether `policy` keeps each pipeline on its home (no sharing)."""
    cls = POLICIES.get(policy)
    return bool(cls is not None and cls.confines_to_home)


def home_bundles(home: Sequence[int], tp: int, topology: Topology) -> tuple[int, ...]:
    """The home as a rollout mapping of whole TP bundles (see the module docstring).

    Raises FieldProblem at ``home`` if a node's part of the home is not a multiple of `tp`.
    """
    by_node: dict[int, list[int]] = {}
    for gpu in sorted(home):
        by_node.setdefault(topology.node_of(gpu), []).append(gpu)
    for node, gpus in sorted(by_node.items()):
        if len(gpus) % tp:
            raise FieldProblem(
                ("home",),
                format_gpu_set(home),
                f"its {len(gpus)} GPU(s) on node {node} do not form whole rollout TP bundles "
                f"(clusters.actor_infer.tp={tp}); under static the home's bundles are the rollout ranks",
            )
    return tuple(g for _, gpus in sorted(by_node.items()) for g in gpus)


def pipeline_spec(pipeline: PipelineConfig, topology: Topology, policy: str) -> PipelineSpec:
    """The PipelineSpec of `pipeline` under `policy` (not validated here)."""
    clusters = {name: c.spec() for name, c in pipeline.clusters.present().items()}
    spec = PipelineSpec(
        pipeline_id=pipeline.id,
        kind=PipelineKind(pipeline.kind),
        clusters=clusters,
        adapters=tuple(a.name for a in pipeline.adapters),
        max_staleness=pipeline.staleness,
        weight=pipeline.weight,
        runtime_estimate_s=pipeline.runtime_estimate_s,
        home=pipeline.home_gpus,
        home_size=pipeline.home_size if not pipeline.home_gpus else 0,
        num_steps=pipeline.num_steps,
    )
    if not pipeline.home_gpus:
        return spec  # a size: the core places it
    confine = confines_to_home(policy)
    if any(c.scope for c in clusters.values()):
        spec = resolve(spec, pipeline.home_gpus, topology, confine)
        spec = dataclasses.replace(spec, home=pipeline.home_gpus, home_size=0)
    if confine:
        rollout = spec.rollout
        clusters = dict(spec.clusters)
        clusters[ROLLOUT_CLUSTER] = ClusterSpec(
            rollout.tp, home_bundles(pipeline.home_gpus, rollout.tp, topology), rollout.scope
        )
        spec = dataclasses.replace(spec, clusters=clusters)
    return spec
