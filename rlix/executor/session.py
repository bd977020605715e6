"""Starting or joining the Ray session the executor runs in, with every local listener on loopback.

Locally (no `--address`), Ray starts with declared GPUs on machines that have none
(`ray.init(num_gpus=N)`); actors then see `CUDA_VISIBLE_DEVICES` set as on a real node. Ray
picks the node's routable address for its listeners by default, and `_node_ip_address=
"127.0.0.1"` does not change that. Ray's own switch for laptops (`RAY_ENABLE_WINDOWS_OR_OSX_
CLUSTER=0`, read when `ray._private.ray_constants` is imported, and by every worker process
Ray spawns) makes the node address the loopback one. It is an internal switch, so `start`
checks what it got: every socket a Ray process listens on must be a loopback address
(`listening_addresses`), else the session is shut down with an error. Ray's dashboard is not
started (plain `ray`, not `ray[default]`) and usage stats are off (no network calls).

With `address`, the executor joins an existing (multi-node) cluster as a driver and leaves
the cluster's network settings alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: The Ray namespace of every named rlix actor (the orchestrator, pipeline actors).
NAMESPACE = "rlix"
LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
LOOPBACK_ADDRESSES = frozenset({"127.0.0.1", "::1", "::ffff:127.0.0.1"})
#: Where a local session writes its GCS address, so `rlix-exec kill` can find the run.
ADDRESS_FILE = os.path.join(os.path.expanduser("~"), ".rlix", "ray_address")


class SessionError(RuntimeError):
    """Ray could not be started or joined as asked."""


@dataclass(frozen=True)
class Session:
    address: str
    local: bool


def _loopback_switch(on: bool) -> None:
    """Set the loopback switch for this process and the processes Ray spawns from it."""
    os.environ[LOOPBACK_SWITCH] = "0" if on else "1"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray._private.ray_constants as constants

    # The constant is read once at import; if ray was imported before this call, set it too.
    constants.ENABLE_RAY_CLUSTER = not on


def start(num_gpus: int, num_cpus: int | None = None, address: str | None = None,
          log_to_driver: bool = False, record_address: bool = True) -> Session:
    """Start Ray locally with `num_gpus` declared GPUs, or join the cluster at `address`.

    Reuses a session this process already has (tests start one per module). A local session
    writes its address for `rlix-exec kill` unless `record_address` is false (a sweep).
    """
    # Joining a local session by its loopback address needs the switch too: without it Ray
    # rewrites "127.0.0.1" to the machine's routable address, where nothing listens.
    local = address is None or address.split(":")[0] in ("127.0.0.1", "localhost")
    _loopback_switch(local)
    import ray

    if ray.is_initialized():
        return Session(ray.get_runtime_context().gcs_address, local)
    kwargs: dict[str, Any] = {"namespace": NAMESPACE, "log_to_driver": log_to_driver}
    if address is None:
        ray.init(num_gpus=num_gpus, num_cpus=num_cpus, include_dashboard=False, **kwargs)
        bad = [a for a in listening_addresses(ray_process_ids()) if a[0] not in LOOPBACK_ADDRESSES]
        if bad:
            ray.shutdown()
            raise SessionError(f"Ray listens on non-loopback addresses {sorted(set(bad))}; refusing to run")
    else:
        try:
            ray.init(address=address, **kwargs)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise SessionError(f"cannot join the Ray cluster at {address!r}: {exc}") from exc
    gcs_address = ray.get_runtime_context().gcs_address
    if address is None and record_address:
        _write_address(gcs_address)
    return Session(gcs_address, local)


def stop() -> None:
    import ray

    ray.shutdown()


def _write_address(gcs_address: str) -> None:
    try:
        os.makedirs(os.path.dirname(ADDRESS_FILE), exist_ok=True)
        with open(ADDRESS_FILE, "w") as f:
            f.write(gcs_address + "\n")
    except OSError:
        pass  # only `rlix-exec kill` without --address needs it


def last_local_address() -> str | None:
    """The GCS address of the last local session started on this machine, if any."""
    try:
        with open(ADDRESS_FILE) as f:
            return f.read().strip() or None
    except OSError:
        return None


def ray_process_ids() -> list[int]:
    """This process and every process it started (locally: GCS, raylet, agents, workers)."""
    import psutil

    me = psutil.Process()
    return [me.pid] + [p.pid for p in me.children(recursive=True)]


def listening_addresses(pids: Iterable[int]) -> list[tuple[str, int, int, str]]:
    """(address, port, pid, process name) of every TCP listener and bound UDP socket of `pids`."""
    import psutil

    found = []
    for pid in pids:
        try:
            process = psutil.Process(pid)
            name = process.name()
            connections = process.net_connections(kind="inet")
        except psutil.Error:
            continue  # the process ended meanwhile
        for conn in connections:
            listening = conn.status == psutil.CONN_LISTEN or (conn.status == psutil.CONN_NONE and not conn.raddr)
            if listening and conn.laddr:
                found.append((conn.laddr.ip, conn.laddr.port, pid, name))
    return found
