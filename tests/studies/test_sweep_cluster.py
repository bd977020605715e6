"""`rlix-sim sweep` and its Ray: joining a cluster started with `ray start --head` (token auth
on, as Ray sets it), an address where nothing answers or a cluster that cannot be joined (one
line, nothing written), and SIGTERM mid-sweep (a clean stop like Ctrl-C: exit 143, rows kept)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from rlix.scenarios import load_scenario
from rlix.sim.cli import main
from rlix.studies import parse_grid, run_sweep
from rlix.traces.options import UsageError

ray = pytest.importorskip("ray")
RLIX_SIM = [str(Path(sys.executable).parent / "rlix-sim")]  # the entry point, as a user runs it


def _env() -> dict[str, str]:
    """This environment without the auth switch a test session may have set: a fresh shell's."""
    return {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}


def test_an_address_where_nothing_answers_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sweep"
    started = time.monotonic()
    assert main(["sweep", "tiny", "--grid", "seed=0", "--out", str(out), "--address", "127.0.0.1:1", "--quiet"]) == 2
    assert time.monotonic() - started < 30
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--address 127.0.0.1:1: nothing answers" in err
    assert not out.exists()


def test_a_cluster_that_cannot_be_joined_leaves_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlix.executor import session

    def refuse(*args: object, **kwargs: object) -> None:
        raise session.SessionError("cannot join the Ray cluster: refused")

    monkeypatch.setattr(session, "start", refuse)
    monkeypatch.setattr(session, "address_problem", lambda address: None)  # as a Ray head answers
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(UsageError, match="cannot join"):
            run_sweep(load_scenario("tiny"), parse_grid(["seed=0"]), tmp_path / "sweep", address=address)
    assert not (tmp_path / "sweep").exists()


def test_an_address_that_is_not_ray_is_one_line_in_seconds(tmp_path: Path) -> None:
    """Something listens there but is no gRPC server (joining would wait for minutes)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(UsageError, match=f"--address {address}: something answers there, but not a Ray cluster"):
            run_sweep(load_scenario("tiny"), parse_grid(["seed=0"]), tmp_path / "sweep", address=address)
        assert time.monotonic() - started < 15
    assert not (tmp_path / "sweep").exists()


def test_a_sweep_joins_a_cluster_started_with_ray_start(tmp_path: Path) -> None:
    import tempfile

    temp_dir = tempfile.mkdtemp(prefix="rs", dir="/tmp")  # Ray's sockets need a short path
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**_env(), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    ray_bin = str(Path(sys.executable).parent / "ray")
    head = subprocess.Popen(
        [ray_bin, "start", "--head", "--block", f"--port={port}", "--num-cpus=1", "--node-ip-address=127.0.0.1",
         "--include-dashboard=false", f"--temp-dir={temp_dir}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        from rlix.executor.session import address_problem

        deadline = time.monotonic() + 120
        while address_problem(f"127.0.0.1:{port}") is not None and time.monotonic() < deadline:
            time.sleep(0.5)
        out = tmp_path / "sweep"
        done = subprocess.run(
            [*RLIX_SIM, "sweep", "tiny", "--grid", "seed=0,1", "--out", str(out), "--address",
             f"127.0.0.1:{port}", "--quiet", "--no-plots"],
            env=_env(), capture_output=True, text=True, timeout=300,
        )
        assert done.returncode == 0, done.stderr
        assert "InvalidAuthToken" not in done.stderr
        assert list(pd.read_parquet(out / "results.parquet")["status"]) == ["ok", "ok"]
    finally:
        head.send_signal(signal.SIGTERM)  # `ray start --block` stops its node's processes
        head.wait(timeout=120)
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_sigterm_mid_sweep_stops_it_cleanly_and_keeps_the_rows(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    seeds = ",".join(str(s) for s in range(60))
    sweep = subprocess.Popen(
        [*RLIX_SIM, "sweep", "tiny", "--grid", f"seed={seeds}", "--out", str(out), "--workers", "1",
         "--quiet", "--no-plots"],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not (out / "results.parquet").exists() and time.monotonic() < deadline and sweep.poll() is None:
            time.sleep(0.2)
        sweep.send_signal(signal.SIGTERM)
        _, err = sweep.communicate(timeout=120)
    finally:
        if sweep.poll() is None:
            sweep.kill()
    assert sweep.returncode == 143, err
    assert "SIGTERM received" not in err
    rows = pd.read_parquet(out / "results.parquet")
    assert 1 <= len(rows) < 60 and set(rows["status"]) == {"ok"}
