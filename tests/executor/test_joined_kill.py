"""`rlix-exec kill PIPELINE` without --address, on the machine of a run that joined a Ray cluster
with `--address` (a head started with `ray start`, no token auth, as on a machine that has
never held a Ray token): it finds the run as it finds a local one."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.executor.child_env import child_env
from tests.executor.demos import short_demo_file

pytest.importorskip("ray")
RLIX_EXEC = [sys.executable, "-m", "rlix.executor.cli"]


def test_kill_finds_a_run_joined_with_address_on_this_machine(tmp_path: Path) -> None:
    from rlix.executor.session import address_problem

    home = tmp_path / "home"
    home.mkdir()
    temp_dir = tempfile.mkdtemp(prefix="rs", dir="/tmp")  # Ray's sockets need a short path
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"127.0.0.1:{port}"
    head = subprocess.Popen(
        [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
         "--num-gpus=2", "--node-ip-address=127.0.0.1", "--include-dashboard=false", f"--temp-dir={temp_dir}"],
        env={**child_env(home), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    run = None
    try:
        deadline = time.monotonic() + 120
        while address_problem(address) is not None:
            assert time.monotonic() < deadline, "the head did not come up"
            time.sleep(0.5)
        out = tmp_path / "run"
        run = subprocess.Popen([*RLIX_EXEC, "run", str(short_demo_file(tmp_path)), "--quiet", "--out", str(out),
                                "--address", address], env=child_env(home), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        address_file = home / ".rlix" / "ray_address"
        deadline = time.monotonic() + 180
        while True:  # until the run is up and both pipelines are launched
            assert run.poll() is None, run.communicate()[0]
            done = subprocess.run([*RLIX_EXEC, "kill", "nosuch"], env=child_env(home), capture_output=True,
                                  text=True, timeout=60)
            if done.stderr.strip() == "rlix-exec: error: no pipeline nosuch in this run (its pipelines: ft, lora)":
                break
            assert time.monotonic() < deadline, done.stderr
            time.sleep(1)
        assert json.loads(address_file.read_text())["address"] == address
        for pipeline in ("lora", "ft"):
            done = subprocess.run([*RLIX_EXEC, "kill", pipeline], env=child_env(home), capture_output=True,
                                  text=True, timeout=60)
            assert done.returncode == 0 and done.stdout.strip() == f"pipeline {pipeline}: killed", done
        output, _ = run.communicate(timeout=120)
        assert run.returncode == 0, output
        summary = json.loads((out / "summary.json").read_text())
        assert {p["state"] for p in summary["pipelines"].values()} == {"killed"}
        assert not address_file.exists()  # the run is over: its address goes
    finally:
        if run is not None and run.poll() is None:
            run.kill()
        head.send_signal(signal.SIGTERM)  # `ray start --block` stops its node's processes
        head.wait(timeout=120)
        shutil.rmtree(temp_dir, ignore_errors=True)
