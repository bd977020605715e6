"""Where the core's GPU ids live in the Ray cluster: one placement group per node, one bundle per GPU.

The core's GPU ids are global: GPU g is GPU g % gpus_per_node of node g // gpus_per_node. Core
node i is the i-th Ray node in a deterministic order (`node_order`): nodes labelled
`rlix/node-index` first by that label, then the head node, then by address and node id; only
alive nodes with at least `gpus_per_node` GPUs count.

At start the orchestrator reserves, on each of those nodes, one STRICT_PACK placement group
whose bundle j is one GPU ({"GPU": 1}), pinned to the node by its `ray.io/node-id` label, so
bundle j *is* core GPU node * gpus_per_node + j for the whole run. Nothing else in the Ray
cluster can take those GPUs; within them the core is the one authority on who uses which.

Why not a placement group per rollout rank, created on expand? Ranks of different pipelines
overlap on the same GPUs and are time-shared under the core, and a rollout engine (a vLLM
engine above all) must stay alive across shrink and expand to sleep and wake, not be rebuilt
each time. So every actor that works on GPUs (a rollout rank's worker, a training cluster's
trainer) is placed in the bundle of its first GPU with a small share of it (`GPU_SHARE`), and
its `CUDA_VISIBLE_DEVICES` is set to the physical ids of exactly its GPUs (`visible_devices`),
probed once per bundle at start. A TP bundle lies in one node's placement group by
construction, so it never spans nodes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlix.policy.specs import Topology

#: The share of a bundle's GPU an actor asks for: the core, not Ray, decides who runs when.
GPU_SHARE = 0.01
#: A node label that fixes a node's place in the topology (`ray start --labels rlix/node-index=1`).
NODE_INDEX_LABEL = "rlix/node-index"
HEAD_RESOURCE = "node:__internal_head__"


class PlacementError(RuntimeError):
    """The Ray cluster cannot hold the scenario's topology (or a mapping cannot be placed)."""


def node_order(nodes: Sequence[Mapping[str, Any]], gpus_per_node: int) -> list[str]:
    """Ray node ids in core node order (see the module docstring)."""
    usable = [n for n in nodes if n.get("Alive") and n.get("Resources", {}).get("GPU", 0) >= gpus_per_node]

    def key(node: Mapping[str, Any]) -> tuple[int, int, bool, str, str]:
        label = (node.get("Labels") or {}).get(NODE_INDEX_LABEL)
        labelled = label is not None and str(label).isdigit()
        return (0 if labelled else 1, int(str(label)) if labelled else 0,
                HEAD_RESOURCE not in node.get("Resources", {}), str(node.get("NodeManagerAddress", "")),
                str(node["NodeID"]))

    return [str(n["NodeID"]) for n in sorted(usable, key=key)]


def cluster_problem(topology: Topology, nodes: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a Ray cluster of `nodes` (`ray.nodes()`) cannot hold `topology` (too few alive
    nodes with `gpus_per_node` GPUs each), in one line; None if it can."""
    gpn = topology.gpus_per_node
    usable = len(node_order(nodes, gpn))
    if usable >= topology.num_nodes:
        return None
    counts = sorted((int(n.get("Resources", {}).get("GPU", 0)) for n in nodes if n.get("Alive")), reverse=True)
    return (f"the scenario's topology is {topology.num_nodes} node(s) of {gpn} GPUs (a TP bundle never spans "
            f"nodes), but the Ray cluster has {len(counts)} alive node(s) with {counts or 'no'} GPUs, "
            f"{usable} of them with at least {gpn}")


@dataclass(frozen=True)
class GpuPool:
    """The reserved GPUs of the run: node i's placement group and its bundles' physical GPU ids."""

    topology: Topology
    node_ids: tuple[str, ...]
    groups: tuple[Any, ...]  # ray.util.placement_group.PlacementGroup per node
    physical: tuple[tuple[str, ...], ...]  # node -> bundle -> physical GPU id

    @staticmethod
    async def create(topology: Topology, timeout_s: float = 60.0) -> GpuPool:
        """Reserve every GPU of the topology (see the module docstring)."""
        import ray
        from ray.util.placement_group import placement_group

        gpn = topology.gpus_per_node
        nodes = ray.nodes()  # type: ignore[no-untyped-call]  # Ray's ray.nodes() is untyped
        problem = cluster_problem(topology, nodes)
        if problem is not None:
            raise PlacementError(problem)
        order = node_order(nodes, gpn)
        node_ids = tuple(order[: topology.num_nodes])
        groups = tuple(
            placement_group([{"GPU": 1.0}] * gpn, strategy="STRICT_PACK", name=group_name(i),
                            bundle_label_selector=[{"ray.io/node-id": node_id}] * gpn)
            for i, node_id in enumerate(node_ids)
        )
        try:
            await asyncio.wait_for(asyncio.gather(*(g.ready() for g in groups)), timeout_s)
        except TimeoutError:
            for group in groups:
                ray.util.remove_placement_group(group)
            raise PlacementError(f"could not reserve {gpn} GPUs on each of {len(node_ids)} nodes "
                                 f"within {timeout_s:.0f} s (are other jobs holding them?)") from None
        physical = []
        for node, group in enumerate(groups):
            probes = [_probe.options(**_bundle_options(group, j)).remote() for j in range(gpn)]
            found = await asyncio.gather(*probes)
            for j, (node_id, _ids) in enumerate(found):
                if node_id != node_ids[node]:
                    raise PlacementError(f"bundle {j} of node {node} landed on Ray node {node_id}, not {node_ids[node]}")
            physical.append(tuple(ids[0] for _n, ids in found))
        return GpuPool(topology, node_ids, groups, tuple(physical))

    def node_of(self, gpus: Sequence[int]) -> int:
        """The node of a set of GPUs that must share one node (a TP bundle, a trainer's GPUs)."""
        nodes = {self.topology.node_of(g) for g in gpus}
        if len(nodes) != 1:
            raise PlacementError(f"GPUs {list(gpus)} span nodes {sorted(nodes)}; one actor works on one node")
        return nodes.pop()

    def actor_options(self, gpus: Sequence[int]) -> dict[str, Any]:
        """Ray actor options placing an actor on the node of `gpus`, in the bundle of the first."""
        node = self.node_of(gpus)
        return _bundle_options(self.groups[node], gpus[0] % self.topology.gpus_per_node)

    def visible_devices(self, gpus: Sequence[int]) -> str:
        """`CUDA_VISIBLE_DEVICES` for an actor working on exactly `gpus`."""
        node = self.node_of(gpus)
        gpn = self.topology.gpus_per_node
        return ",".join(self.physical[node][g % gpn] for g in gpus)

    def gpus_of_node(self, node: int) -> tuple[int, ...]:
        gpn = self.topology.gpus_per_node
        return tuple(range(node * gpn, (node + 1) * gpn))

    def remove(self) -> None:
        import ray

        for group in self.groups:
            ray.util.remove_placement_group(group)


def group_name(node: int) -> str:
    return f"rlix-node-{node}"


def remove_left_groups(num_nodes: int) -> None:
    """Remove the run's placement groups if an orchestrator that died left them: they live as
    long as the driver's Ray job, and the next run in it could reserve no GPU."""
    import ray

    for node in range(num_nodes):
        try:
            ray.util.remove_placement_group(ray.util.get_placement_group(group_name(node)))
        except Exception:  # noqa: BLE001 - none left by that name
            continue


def _bundle_options(group: Any, bundle_index: int) -> dict[str, Any]:
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return {
        "num_cpus": 0,
        "num_gpus": GPU_SHARE,
        "scheduling_strategy": PlacementGroupSchedulingStrategy(
            group, placement_group_bundle_index=bundle_index, placement_group_capture_child_tasks=False
        ),
    }


def control_options() -> dict[str, Any]:
    """Options for control-plane actors (orchestrator, pipelines): on the driver's node, no GPU,
    so losing a worker node never takes the control plane with it."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node_id = ray.get_runtime_context().get_node_id()
    return {"num_cpus": 0, "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}


def _probe_bundle() -> tuple[str, list[str]]:
    import ray

    return ray.get_runtime_context().get_node_id(), [str(i) for i in ray.get_gpu_ids()]


class _LazyRemote:
    """`ray.remote` applied on first use, so importing this module does not import ray."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.remote_fn: Any = None

    def options(self, **kwargs: Any) -> Any:
        if self.remote_fn is None:
            import ray

            self.remote_fn = ray.remote(self.fn)
        return self.remote_fn.options(**kwargs)


_probe = _LazyRemote(_probe_bundle)
