"""Joining a Ray cluster by address: what answers there is told apart in seconds, since
`ray.init` would wait minutes on a port where nothing, or something other than Ray, listens.
Local servers stand in for each case; a real head node is joined in
tests/studies/test_sweep_cluster.py."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rlix.executor.session import SessionError, address_problem, check_reachable

#: A gRPC server's first bytes: an empty HTTP/2 SETTINGS frame (length 0, type 4, no flags,
#: stream 0).
SETTINGS = bytes(3) + b"\x04" + bytes(5)


@contextmanager
def _server(answer: Callable[[socket.socket], None]) -> Iterator[str]:
    """A loopback server that runs `answer` on each connection; yields its host:port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                continue
            with connection:
                answer(connection)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def _grpc(connection: socket.socket) -> None:
    connection.recv(64)
    connection.sendall(SETTINGS)


def _http1(connection: socket.socket) -> None:
    connection.recv(64)
    connection.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")


def _http2_404(connection: socket.socket) -> None:
    """An HTTP/2 server that is not gRPC (a proxy, a web server): SETTINGS, then a 404 for the
    call (`:status` 404 from HPACK's static table, END_STREAM and END_HEADERS)."""
    connection.recv(256)
    connection.sendall(SETTINGS + bytes([0, 0, 1, 1, 5, 0, 0, 0, 1, 0x8D]))
    time.sleep(0.5)


def _grpc_answering(connection: socket.socket) -> None:
    """A gRPC server that answers the call (status 200 said as a literal, as an encoder may)."""
    connection.recv(256)
    block = b"\x48\x03200"
    connection.sendall(SETTINGS + bytes([0, 0, len(block), 1, 5, 0, 0, 0, 1]) + block)
    time.sleep(0.5)


def _silent(connection: socket.socket) -> None:
    time.sleep(3)


def _closes(connection: socket.socket) -> None:
    pass


@pytest.mark.parametrize("answer", [_grpc, _grpc_answering], ids=["settings only", "status 200"])
def test_a_grpc_server_is_joined(answer: Callable[[socket.socket], None]) -> None:
    with _server(answer) as address:
        assert address_problem(address) is None
        check_reachable(address)


def test_an_http2_server_that_is_not_grpc_is_refused_in_seconds() -> None:
    """`ray.init` would retry on it for half a minute, printing a warning every second."""
    with _server(_http2_404) as address:
        started = time.monotonic()
        problem = address_problem(address, timeout_s=1.0)
        assert problem is not None and "an HTTP/2 server that answers a Ray call with HTTP status 404" in problem
        assert time.monotonic() - started < 3


@pytest.mark.parametrize("answer", [_http1, _silent, _closes], ids=["http/1.1", "silent", "closes"])
def test_something_else_is_refused_in_seconds(answer: Callable[[socket.socket], None]) -> None:
    with _server(answer) as address:
        started = time.monotonic()
        problem = address_problem(address, timeout_s=1.0)
        assert problem is not None and problem.startswith("something answers there, but not a Ray cluster")
        assert time.monotonic() - started < 3
        with pytest.raises(SessionError, match="not a Ray cluster"):
            check_reachable(address)


def test_nothing_there() -> None:
    with socket.socket() as probe:  # a port just freed: nothing listens on it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert address_problem(f"127.0.0.1:{port}") == "nothing answers there"
    assert address_problem("127.0.0.1:notaport") == "nothing answers there"


def test_tls_clusters_are_not_probed(monkeypatch: pytest.MonkeyPatch) -> None:
    """With TLS a handshake comes first, and a plain-text hello would refuse a good cluster."""
    monkeypatch.setenv("RAY_USE_TLS", "1")
    with _server(_http1) as address:
        assert address_problem(address) is None


#: A driver that joins the cluster at argv[1] as `rlix-exec run --address` does and starts one actor.
_JOIN_AND_START_AN_ACTOR = """
import sys
import ray
from rlix.executor import session
session.start(num_gpus=0, address=sys.argv[1], quiet=True)

@ray.remote(num_cpus=0)
class Echo:
    def ping(self):
        return "ran"

print(ray.get(Echo.remote().ping.remote(), timeout=60))
"""


def test_a_cluster_without_token_auth_is_joined_with_a_token_at_hand(tmp_path: Path) -> None:
    """Ray writes ~/.ray/auth_token for every local cluster (an `rlix-exec run cpu-demo` makes
    one). Joining a cluster started without token auth must not take that token: Ray's token
    loader then has the driver demand it of the cluster's calls, which never carry one, and
    every actor the driver starts is cancelled (the run ended with "the orchestrator actor died")."""
    import shutil
    import signal
    import subprocess
    import sys
    import tempfile

    from rlix.executor.session import address_problem, cluster_auth_mode
    from tests.executor.child_env import child_env

    pytest.importorskip("ray")
    head_home, driver_home = tmp_path / "head", tmp_path / "driver"
    head_home.mkdir()
    (driver_home / ".ray").mkdir(parents=True)
    (driver_home / ".ray" / "auth_token").write_text("b" * 64 + "\n")  # left by some earlier local cluster
    temp_dir = tempfile.mkdtemp(prefix="rs", dir="/tmp")  # Ray's sockets need a short path
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"127.0.0.1:{port}"
    env = {**child_env(head_home), "RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen(
        [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", f"--port={port}", "--num-cpus=1",
         "--node-ip-address=127.0.0.1", "--include-dashboard=false", f"--temp-dir={temp_dir}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while address_problem(address) is not None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert cluster_auth_mode(address) == "disabled"
        done = subprocess.run([sys.executable, "-c", _JOIN_AND_START_AN_ACTOR, address], env=child_env(driver_home),
                              capture_output=True, text=True, timeout=180)
        assert done.stdout.split() == ["ran"], done.stderr[-2000:]
    finally:
        head.send_signal(signal.SIGTERM)  # `ray start --block` stops its node's processes
        head.wait(timeout=120)
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_a_cluster_with_token_auth_is_told_apart(ray_session: Any) -> None:
    from rlix.executor.session import cluster_auth_mode

    assert cluster_auth_mode(ray_session.address) == "token"  # a local session: token auth, as Ray sets it
    assert address_problem(ray_session.address) is None  # it answers the call without a token: 200, then status 16
