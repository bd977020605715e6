"""Multi-node placement on a real two-node Ray cluster (`ray.cluster_utils.Cluster`, 2 nodes x 2
declared GPUs, all on loopback): a TP-2 rollout rank lives on one node, and losing a node revokes
its ranks (GpuLost) while the rest of the run goes on."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from rlix.executor import session
from rlix.executor.api import Client, start_orchestrator
from rlix.executor.live import node_map
from rlix.executor.synthetic import SyntheticWorkload
from rlix.executor.workload import PipelineSetup
from rlix.pipelines import AdapterConfig, ProgramConfig
from rlix.policy import ClusterSpec, PipelineKind, PipelineSpec, Topology
from rlix.policy.run_checks import check_run

cluster_utils = pytest.importorskip("ray.cluster_utils")


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[tuple[Any, Any]]:
    if ray.is_initialized():
        ray.shutdown()
    session._loopback_switch(True)  # the test cluster's processes start from this one
    cluster = cluster_utils.Cluster(
        initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": 2, "include_dashboard": False}
    )
    worker_node = cluster.add_node(num_cpus=1, num_gpus=2)
    session.start(num_gpus=0, address=cluster.address)
    cluster.wait_for_nodes()
    yield cluster, worker_node
    ray.shutdown()
    cluster.shutdown()


def test_the_run_folder_must_be_seen_by_every_node(two_nodes: tuple[Any, Any], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Trainers on the other node write models and checkpoints into the run's live folder: a
    parent the node does not share (its own disk) is refused before the run, nothing written.
    (Runs before the test below, which takes the worker node away.)"""
    from rlix.executor import cluster_checks, live
    from rlix.executor.run import ExecutorInputError, plan
    from tests.executor.test_cluster_fit import TWO_NODES

    cluster, worker_node = two_nodes
    probe = tmp_path / "probe"
    probe.write_text("token")
    assert cluster_checks.nodes_seeing(probe, "token", [worker_node.node_id]) == {worker_node.node_id: True}
    assert cluster_checks.nodes_seeing(tmp_path / "absent", "token", [worker_node.node_id]) == {worker_node.node_id: False}

    scenario = tmp_path / "two-nodes.yaml"
    scenario.write_text(TWO_NODES)
    # As on a node with a disk of its own: the file written here is not there.
    monkeypatch.setattr(cluster_checks, "nodes_seeing", lambda probe, token, nodes: dict.fromkeys(nodes, False))
    out = tmp_path / "runs" / "run"
    with pytest.raises(ExecutorInputError, match=f"the run folder's parent {out.parent} is not shared with node"):
        live.execute(plan(str(scenario)), out_dir=out, address=cluster.address, quiet=True)
    assert not (tmp_path / "runs").exists()


def test_tp2_ranks_stay_on_one_node_and_a_lost_node_is_revoked(two_nodes: tuple[Any, Any]) -> None:
    cluster, worker_node = two_nodes
    handle = start_orchestrator(Topology(2, 2), check_invariants=True, tick_s=0.5)
    client = Client(handle)
    pool = ray.get(handle.info.remote())["pool"]
    assert pool.node_ids[0] == ray.get_runtime_context().get_node_id()  # the head node is node 0
    assert pool.node_ids[1] == worker_node.node_id
    for gpus in ((0, 1), (2, 3)):
        assert len(pool.visible_devices(gpus).split(",")) == 2
    nodes = node_map(pool)  # summary.json's `nodes`: the tables' GPUs told apart by machine
    assert [(n["node"], n["gpus"], n["ray_node_id"]) for n in nodes] == [
        (0, [0, 1], pool.node_ids[0]), (1, [2, 3], worker_node.node_id)]
    assert {n["address"] for n in nodes} == {"127.0.0.1"} and all(len(n["physical_gpus"]) == 2 for n in nodes)
    with pytest.raises(Exception, match="span"):
        pool.visible_devices((1, 2))

    spec = PipelineSpec("mn", PipelineKind.FULL_FINETUNE,
                        {"actor_infer": ClusterSpec(2, (0, 1, 2, 3)), "actor_train": ClusterSpec(1, (0, 1))})
    program = ProgramConfig("mn", PipelineKind.FULL_FINETUNE, (AdapterConfig("base", 2, 0),),
                            num_prompts=8, samples_per_prompt=2)
    # Fast enough that the lone rank left finishes the steps in seconds, slow enough (1-2 s a
    # trajectory) that both ranks are caught generating together.
    params = {"tokens_per_s": 60.0, "min_tokens": 60, "max_tokens": 100, "chunk_tokens": 4}
    client.launch(PipelineSetup(spec, program, SyntheticWorkload, params, max_batch_per_rank=4))

    def both_ranks_generating() -> dict[str, Any] | None:
        snap = ray.get(ray.get_actor("pipeline-mn").snapshot.remote())
        busy = snap["ranks"]["in_flight"]
        return snap if len(busy) == 2 and all(busy.values()) else None

    deadline = time.monotonic() + 180
    while (snap := both_ranks_generating()) is None:
        assert time.monotonic() < deadline, "the two TP-2 ranks never generated together"
        time.sleep(0.2)
    for dp_rank, node in ((0, 0), (1, 1)):
        node_id, devices = ray.get(snap["ranks"]["workers"][dp_rank].where.remote())
        assert node_id == pool.node_ids[node] and len(devices.split(",")) == 2

    cluster.remove_node(worker_node)  # node 1 and its GPUs 2-3 are gone mid-rollout
    status = client.wait_done(timeout_s=240)
    assert status["mn"]["status"] == "finished", (status, client.snapshot()["decision_failures"])
    assert client.snapshot()["lost_gpus"] == [2, 3]
    lines = [json.loads(line) for line in ray.get(handle.event_lines.remote(1))]
    lost = [line["event"]["gpu"] for line in lines if line["event"]["type"] == "GpuLost"]
    revoked = [d for line in lines for d in line["decisions"] if d["type"] == "Revoke"]
    assert sorted(lost) == [2, 3] and [d["dp_rank"] for d in revoked] == [1]
    tables = ray.get(handle.tables.remote(["mn"]))
    check_run({"mn": spec}, tables["allocations"], tables["rollouts"])
    requeued = [r for r in tables["rollouts"] if r["status"] == "requeued" and r["dp_rank"] == 1]
    assert requeued, "the lost rank's trajectories were re-queued"
    assert {r["trajectory_id"] for r in tables["rollouts"] if r["status"] == "completed"} == set(range(32))
    ray.get(handle.shutdown.remote())
