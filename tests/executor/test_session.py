"""The local Ray session: declared GPUs on a CPU machine, every socket on loopback."""

from __future__ import annotations

import ray

from rlix.executor.session import LOOPBACK_ADDRESSES, listening_addresses, ray_process_ids


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
