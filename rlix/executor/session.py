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

import json
import logging
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
#: Ray's switch for token authentication (on by default for a new local cluster since Ray 2.5x).
AUTH_MODE_VARIABLE = "RAY_AUTH_MODE"


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
          log_to_driver: bool = False, record_address: bool = True, auth_mode: str | None = None,
          quiet: bool = False) -> Session:
    """Start Ray locally with `num_gpus` declared GPUs, or join the cluster at `address`.

    Reuses a session this process already has (tests start one per module). A local session
    writes its address for `rlix-exec kill` unless `record_address` is false (a sweep).
    `auth_mode` is the joined cluster's ("token" or "disabled"; by default `joined_auth_mode`
    finds it): Ray turns token auth on for a new local cluster, but a client given an explicit
    address must be told, or every call is refused as `InvalidAuthToken`; the token itself is
    found where Ray keeps it. A RAY_AUTH_MODE set in the environment wins. `quiet` keeps
    Ray's own log lines (connecting, signal handlers) off a short command's output.
    """
    if address is not None:  # a dead address fails even where this process has a session up
        check_reachable(address)
        if auth_mode is None:
            auth_mode = joined_auth_mode(address)
    if auth_mode in ("token", "disabled") and AUTH_MODE_VARIABLE not in os.environ:
        os.environ[AUTH_MODE_VARIABLE] = auth_mode
        # Ray reads its config at import: if it was imported already, have it read again (what
        # Ray does itself when it turns token auth on for a new local cluster).
        from ray._raylet import Config  # type: ignore[attr-defined]  # Ray's private config module, untyped

        Config.initialize("")
    # Joining a local session by its loopback address needs the switch too: without it Ray
    # rewrites "127.0.0.1" to the machine's routable address, where nothing listens.
    local = address is None or address.split(":")[0] in ("127.0.0.1", "localhost")
    _loopback_switch(local)
    import ray

    if ray.is_initialized():
        return Session(ray.get_runtime_context().gcs_address, local)
    kwargs: dict[str, Any] = {"namespace": NAMESPACE, "log_to_driver": log_to_driver}
    if quiet:
        kwargs["logging_level"] = logging.ERROR
    if address is None:
        # "local": a new instance even when a cluster started with `ray start` runs on this
        # machine (ray.init() without an address joins that one, where num_gpus is refused).
        ray.init(address="local", num_gpus=num_gpus, num_cpus=num_cpus, include_dashboard=False, **kwargs)
        bad = [a for a in listening_addresses(ray_process_ids()) if a[0] not in LOOPBACK_ADDRESSES]
        if bad:
            ray.shutdown()
            raise SessionError(f"Ray listens on non-loopback addresses {sorted(set(bad))}; refusing to run")
    else:
        try:
            ray.init(address=address, **kwargs)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise SessionError(f"cannot join the Ray cluster at {address!r}: {exc}") from exc
        except ray.exceptions.AuthenticationError:
            raise SessionError(f"cannot join the Ray cluster at {address!r}: it uses token authentication and "
                               "no token was found (~/.ray/auth_token, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH)") from None
    gcs_address = ray.get_runtime_context().gcs_address
    if address is None and record_address:
        _write_address(gcs_address)
    return Session(gcs_address, local)


def stop() -> None:
    """Shut Ray down; the address file goes too if this process wrote it (the run is over)."""
    import ray

    ray.shutdown()
    mine = read_address_file()
    if mine is not None and mine.pid == os.getpid():
        forget_address()


@dataclass(frozen=True)
class LocalRun:
    """What a local run leaves in ADDRESS_FILE for `rlix-exec kill`: where its Ray session is,
    which process drives it, and whether Ray's token auth is on (a client must then say so)."""

    address: str
    pid: int
    auth_mode: str


def record_joined_run() -> None:
    """Write this process's joined cluster to ADDRESS_FILE, as a local run does, so that
    `rlix-exec kill` on this machine finds a run started with --address too; `stop` removes it."""
    import ray

    _write_address(ray.get_runtime_context().gcs_address)


def _write_address(gcs_address: str) -> None:
    record = {"address": gcs_address, "pid": os.getpid(),
              "auth_mode": os.environ.get(AUTH_MODE_VARIABLE, "disabled").lower()}
    try:
        os.makedirs(os.path.dirname(ADDRESS_FILE), exist_ok=True)
        with open(ADDRESS_FILE, "w") as f:
            f.write(json.dumps(record) + "\n")
    except OSError:
        pass  # only `rlix-exec kill` without --address needs it


def read_address_file() -> LocalRun | None:
    """The record of the last local run, as written (alive or not); None if absent or unreadable."""
    try:
        with open(ADDRESS_FILE) as f:
            data = json.loads(f.read())
        return LocalRun(str(data["address"]), int(data["pid"]), str(data.get("auth_mode", "disabled")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def forget_address() -> None:
    try:
        os.remove(ADDRESS_FILE)
    except OSError:
        pass


def running_local_run() -> LocalRun | None:
    """The local run whose driver is still alive; a stale record (its driver gone, e.g. killed
    before it could clean up) is removed, so nothing ever waits on a dead address."""
    run = read_address_file()
    if run is None:
        if os.path.exists(ADDRESS_FILE):
            forget_address()  # unreadable: written by another version, or cut short
        return None
    if not process_alive(run.pid):
        forget_address()
        return None
    return run


def process_alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie is not)."""
    import psutil

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def joined_auth_mode(address: str) -> str | None:
    """How a client must join the cluster at `address`: as this machine's rlix run says (its
    address file), else as the cluster's head answers a call without a token (`cluster_auth_mode`):
    "token" if it refuses it, "disabled" if it takes it. Only when that cannot be told (a ray://
    address, no answer), with token auth when a Ray token is at hand (~/.ray/auth_token,
    RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH). A RAY_AUTH_MODE the user set is theirs: None.

    Joining a cluster without token auth with a token is no cure-all: Ray's token loader, once
    it has looked, makes this process demand the token of every call the cluster makes to it,
    which such a cluster never sends, so every actor the driver creates is cancelled."""
    local = running_local_run()
    if local is not None and local.address == address:
        return local.auth_mode
    if AUTH_MODE_VARIABLE in os.environ:
        return None
    asked = cluster_auth_mode(address)
    if asked is not None:
        return asked
    from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]  # Ray's private auth module, untyped

    return "token" if AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True) else None


#: Run in a child process: whether the GCS at argv[1] takes a call without a token.
_AUTH_PROBE = """
import sys
from ray._raylet import GcsClient
try:
    GcsClient(address=sys.argv[1])
except Exception as error:
    print("token" if "InvalidAuthToken" in str(error) or type(error).__name__ == "AuthenticationError" else "unknown")
else:
    print("disabled")
"""


def cluster_auth_mode(address: str, timeout_s: float = 30.0) -> str | None:
    """"token" or "disabled": whether the Ray cluster at a host:port `address` wants token
    auth, asked of its head in a child process that holds no token (in this one, Ray's token
    loader would keep the token once it looked for one); None if that cannot be told."""
    import subprocess
    import sys

    if address == "auto" or "://" in address:
        return None
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    env[AUTH_MODE_VARIABLE] = "disabled"
    try:
        done = subprocess.run([sys.executable, "-c", _AUTH_PROBE, address], env=env, capture_output=True,
                              text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    answer = done.stdout.strip().splitlines()[-1:] if done.stdout else []
    return answer[0] if answer and answer[0] in ("token", "disabled") else None


def check_reachable(address: str) -> None:
    """SessionError unless something answers at a host:port `address` ("auto" and ray://
    client addresses are left to Ray): a dead address makes `ray.init` retry for minutes."""
    if address == "auto" or "://" in address:
        return
    problem = address_problem(address)
    if problem is not None:
        raise SessionError(f"cannot join the Ray cluster at {address!r}: {problem}")


#: An HTTP/2 client's connection preface and an empty SETTINGS frame. A gRPC server (a Ray
#: head's GCS) answers with a SETTINGS frame of its own at once; a server of anything else
#: does not, and `ray.init` would wait on it for minutes.
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(3) + b"\x04" + bytes(5)
_SETTINGS_FRAME = 0x04


def address_problem(address: str, timeout_s: float = 2.0) -> str | None:
    """Why a host:port `address` is no Ray cluster to join ("nothing answers there", or
    something that is not a gRPC server does), or None; in at most about three times `timeout_s`.

    The hello carries a call of the GCS (`_gcs_call`): a gRPC server answers it with HTTP
    status 200 (a Ray head also when it refuses the call for want of a token), while another
    HTTP/2 server (a proxy, a web server) answers 404 or the like, on which `ray.init` would
    retry for half a minute. Only a status said plainly and not 200 counts against it."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        connection = socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s)
    except (OSError, ValueError):
        return "nothing answers there"
    not_ray = ("something answers there, but not a Ray cluster ({}; a head node's address is its "
               "GCS port, 6379 unless it was started with another)")
    with connection:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            return None  # a TLS handshake comes first: a plain-text hello proves nothing there
        try:
            connection.sendall(_HTTP2_HELLO + _gcs_call(address))
            head = _receive(connection, 9, timeout_s)
        except OSError:
            head = b""
        if not (len(head) == 9 and head[3] == _SETTINGS_FRAME):
            return not_ray.format("no gRPC server")
        status = _answer_status(connection, head, timeout_s)
    if status is not None and status != "200":
        return not_ray.format(f"an HTTP/2 server that answers a Ray call with HTTP status {status}")
    return None


#: HPACK's static table entries of `:status` (RFC 7541, appendix A): index -> status.
_STATUS_ENTRIES = {8: "200", 9: "204", 10: "206", 11: "304", 12: "400", 13: "404", 14: "500"}
_HEADERS_FRAME, _RST_STREAM_FRAME, _GOAWAY_FRAME = 0x01, 0x03, 0x07


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def _gcs_call(address: str) -> bytes:
    """An HTTP/2 HEADERS and DATA frame on stream 1: a gRPC call of the GCS's GetClusterId with
    an empty request (HPACK without Huffman coding or indexing: RFC 7541, 6.1 and 6.2.2)."""

    def literal(name_index: int, value: str) -> bytes:
        text = value.encode()
        name = bytes([name_index]) if name_index < 15 else bytes([15, name_index - 15])
        return name + bytes([len(text)]) + text

    block = (b"\x83\x86"  # :method POST, :scheme http
             + literal(4, "/ray.rpc.NodeInfoGcsService/GetClusterId") + literal(1, address[:100])
             + literal(31, "application/grpc") + b"\x00\x02te\x08trailers")
    return _frame(_HEADERS_FRAME, 0x04, 1, block) + _frame(0x00, 0x01, 1, bytes(5))  # END_HEADERS; END_STREAM


def _answer_status(connection: Any, first: bytes, timeout_s: float) -> str | None:
    """The HTTP status of the server's answer on stream 1, when its header block says it in
    plain text (not Huffman coded), within `timeout_s`; None otherwise."""
    import time

    deadline = time.monotonic() + timeout_s
    head = first
    while True:
        length, kind, flags = int.from_bytes(head[:3], "big"), head[3], head[4]
        stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
        left_s = deadline - time.monotonic()
        try:
            payload = _receive(connection, length, max(left_s, 0.01)) if length else b""
        except OSError:
            return None
        if len(payload) < length:
            return None
        if kind in (_RST_STREAM_FRAME, _GOAWAY_FRAME):
            return None
        if kind == _HEADERS_FRAME and stream == 1:
            return _status_of(payload, flags)
        try:
            head = _receive(connection, 9, max(deadline - time.monotonic(), 0.01))
        except OSError:
            return None
        if len(head) < 9:
            return None


def _status_of(payload: bytes, flags: int) -> str | None:
    """`:status` when it is the first field of a HEADERS frame's block, said plainly."""
    if flags & 0x08:  # PADDED: a pad length first
        payload = payload[1:]
    if flags & 0x20:  # PRIORITY: 5 bytes first
        payload = payload[5:]
    if not payload:
        return None
    first = payload[0]
    if first & 0x80:  # an indexed field
        return _STATUS_ENTRIES.get(first & 0x7F)
    if first & 0xC0 == 0x40:  # a literal with incremental indexing
        index = first & 0x3F
    elif first & 0xE0 == 0x00:  # a literal without indexing or never indexed
        index = first & 0x0F
    else:
        return None  # a table size update first: not read further
    rest = payload[1:]
    if index not in _STATUS_ENTRIES or not rest or rest[0] & 0x80:  # no :status, or Huffman coded
        return None
    size = rest[0] & 0x7F
    value = rest[1:1 + size]
    return value.decode("ascii", "replace") if len(value) == size else None


def _receive(connection: Any, num_bytes: int, timeout_s: float) -> bytes:
    """Up to `num_bytes` from a socket, within `timeout_s` (fewer if it closes or stays quiet)."""
    import time

    data = b""
    deadline = time.monotonic() + timeout_s
    while len(data) < num_bytes and (left_s := deadline - time.monotonic()) > 0:
        connection.settimeout(left_s)
        chunk = connection.recv(num_bytes - len(data))
        if not chunk:
            break
        data += chunk
    return data


def raylet_pids() -> list[int]:
    """The raylet(s) this process started (a local session): its workers carry the pid in
    their environment (RAY_RAYLET_PID), which is how a resume finds a cut run's stragglers."""
    import psutil

    found = []
    for pid in ray_process_ids():
        try:
            if psutil.Process(pid).name() == "raylet":
                found.append(pid)
        except psutil.Error:
            continue
    return found


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
