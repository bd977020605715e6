"""The local Ray session: declared GPUs on a CPU machine, every socket on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from rlix.executor.session import LOOPBACK_ADDRESSES, listening_addresses, ray_process_ids
from tests.executor.child_env import child_env


@ray.remote(num_cpus=0)
class _Probe:
    def node_ip(self) -> str:
        return ray.util.get_node_ip_address()


def test_declared_gpus(ray_session: object) -> None:
    assert ray.cluster_resources().get("GPU") == 4


def test_every_ray_listener_is_loopback(ray_session: object) -> None:
    probe = _Probe.remote()  # a worker process listens too
    assert ray.get(probe.node_ip.remote()) == "127.0.0.1"
    pids = ray_process_ids()
    names = {n for _a, _p, _pid, n in listening_addresses(pids)}
    found = listening_addresses(pids)
    assert len(pids) >= 4 and {"gcs_server", "raylet"} <= names, (pids, names)
    exposed = [entry for entry in found if entry[0] not in LOOPBACK_ADDRESSES]
    assert not exposed, f"Ray listens beyond loopback: {exposed}"
    ray.kill(probe)


def test_a_local_start_ignores_a_cluster_started_on_the_machine(tmp_path: Path) -> None:
    """Ray's own init joins the cluster a `ray start` on this machine recorded (and then
    refuses the declared GPUs); a run without --address must start its own instead."""
    cluster_utils = pytest.importorskip("ray.cluster_utils")
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        code = ("import json, ray\n"
                "from rlix.executor.session import start\n"
                "s = start(num_gpus=2, num_cpus=1, record_address=False, quiet=True)\n"
                "print(json.dumps([s.address, ray.cluster_resources().get('GPU')]))\n"
                "ray.shutdown()\n")
        done = subprocess.run([sys.executable, "-c", code], env=child_env(tmp_path), capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        address, num_gpus = json.loads(done.stdout.strip().splitlines()[-1])
        assert address != cluster.address and num_gpus == 2
    finally:
        cluster.shutdown()
