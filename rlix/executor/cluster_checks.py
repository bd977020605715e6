"""The checks a run joining a Ray cluster (`--address`) makes before anything of it starts.

The cluster must hold the topology's nodes and GPUs with no other rlix run going
(`check_cluster`), and on several nodes every other node must see the run's live folder as the
driver's machine does (`check_shared`): their trainers write models and checkpoints into it.
A refusal (`ClusterRefused`) leaves the session and removes the folders the run made for itself.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from rlix.executor.run import ExecutorInputError
from rlix.runs.paths import missing_parents, remove_if_empty


class ClusterRefused(ExecutorInputError):
    """The Ray cluster cannot hold the run's GPUs (too few nodes or GPUs, or held by others)."""


def check_cluster(topology: Any, address: str, started: bool) -> None:
    """ClusterRefused, the session we joined left, unless the joined cluster has the nodes and
    GPUs of `topology` and no rlix run going (else the orchestrator would fail after the run
    began)."""
    import ray

    from rlix.executor import session
    from rlix.executor.orchestrator import ORCHESTRATOR_NAME
    from rlix.executor.placement import cluster_problem

    problem = cluster_problem(topology, ray.nodes())  # type: ignore[no-untyped-call]  # Ray's ray.nodes() is untyped
    if problem is None:
        try:
            ray.get_actor(ORCHESTRATOR_NAME, namespace=session.NAMESPACE)
        except ValueError:
            pass
        else:
            problem = (f"an rlix run is going there already (its orchestrator {ORCHESTRATOR_NAME!r}; one run per "
                       f"Ray cluster): wait for it to end, or remove its pipelines with `rlix-exec kill PIPELINE "
                       f"--address {address}`")
    if problem is not None:
        if started:
            session.stop()
        raise ClusterRefused(f"cannot run on the Ray cluster at {address}: {problem}")


def check_shared(live: Path, topology: Any, address: str, started: bool, made: list[Path]) -> None:
    """ClusterRefused, the session left and the folders in `made` removed, unless every other
    node of the topology sees the live folder as this machine does: a file written here is read
    there. Its trainers save models and checkpoints into it, which the driver moves into the
    run folder at the end; on a disk of its own a node's would be lost without a word."""
    import secrets

    import ray

    from rlix.executor import session
    from rlix.executor.placement import node_order

    nodes = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]  # Ray's ray.nodes() is untyped
    here = ray.get_runtime_context().get_node_id()
    others = [n for n in node_order(nodes, topology.gpus_per_node)[: topology.num_nodes] if n != here]
    if not others:
        return
    token = secrets.token_hex(8)
    probe = live / f".shared-{token}"
    try:
        live.mkdir(parents=True, exist_ok=True)
        probe.write_text(token)
        seen = nodes_seeing(probe, token, others)
    finally:
        probe.unlink(missing_ok=True)
    blind = [n for n in others if not seen.get(n)]
    if blind:
        where = {str(n["NodeID"]): str(n.get("NodeManagerAddress", "")) for n in nodes}
        named = ", ".join(f"{where.get(n, '?')} ({n[:8]})" for n in blind)
        if started:
            session.stop()
        remove_made(made)
        raise ClusterRefused(f"cannot run on the Ray cluster at {address}: the run folder's parent "
                             f"{live.parent.absolute()} is not shared with node(s) {named}, whose trainers write "
                             "models and checkpoints into it: on a multi-node cluster put --out on a file system "
                             "every node mounts at the same path")


def nodes_seeing(probe: Path, token: str, node_ids: list[str], timeout_s: float = 60.0) -> dict[str, bool]:
    """Whether a task on each of `node_ids` reads `token` from the file `probe`."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    reader = ray.remote(_reads)
    refs = {n: reader.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False))
            .remote(str(probe.absolute()), token) for n in node_ids}
    seen = {}
    for node_id, ref in refs.items():
        try:
            seen[node_id] = bool(ray.get(ref, timeout=timeout_s))
        except Exception:  # noqa: BLE001 - a node that cannot answer does not see it either
            seen[node_id] = False
    return seen


def _reads(path: str, token: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read() == token
    except OSError:
        return False


def made_for(folder: Path) -> list[Path]:
    """`folder` and those of its parents that do not exist yet, deepest first (none when it
    exists): what a run makes for its live folder, removed again (`remove_made`) if refused."""
    return [] if folder.exists() else [folder, *missing_parents(folder)]


def remove_made(made: list[Path]) -> None:
    """Remove the folders of `made_for` a run made before it was refused: the first (the live
    folder) whole, the parents while they are empty."""
    if made:
        shutil.rmtree(made[0], ignore_errors=True)
        remove_if_empty(made[1:])
