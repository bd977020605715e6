"""Operating `rlix-exec` safely: output paths checked before Ray starts, `--overwrite` that only
replaces run folders, `kill` that answers within seconds, Ctrl-C / SIGTERM / a dead
orchestrator that leave the record so far, faults and final states in `summary.json`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import ray

from rlix.executor.cli import main
from tests.executor.child_env import child_env
from tests.executor.demos import SHORT_DEMO_STEPS, short_demo_file, two_gpu_demo

RLIX_EXEC = [sys.executable, "-m", "rlix.executor.cli"]


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlix-exec: error: "), err
    return err[0]


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("make", ["file", "under_file", "proc", "not_a_run", "not_a_run_overwrite", "run_no_overwrite"])
def test_a_bad_out_is_one_line_before_ray_starts(tmp_path: Path, make: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "afile").write_text("keep")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "results.csv").write_text("precious")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "summary.json").write_text("{}")
    out, extra = {
        "file": (tmp_path / "afile", []), "under_file": (tmp_path / "afile" / "sub", []),
        "proc": (Path("/proc/rlix-test/x"), []), "not_a_run": (tmp_path / "data", []),
        "not_a_run_overwrite": (tmp_path / "data", ["--overwrite"]), "run_no_overwrite": (tmp_path / "run", []),
    }[make]
    before = {p: sorted(os.listdir(p)) for p in (tmp_path, tmp_path / "data", tmp_path / "run")}
    started = time.monotonic()
    assert main(["run", "cpu-demo", "--out", str(out), *extra]) == 2
    line = _one_error_line(capsys)
    assert str(out) in line
    assert not ray.is_initialized()
    assert time.monotonic() - started < 30  # the model check only; no training
    assert {p: sorted(os.listdir(p)) for p in before} == before
    assert (tmp_path / "data" / "results.csv").read_text() == "precious"


def test_a_missing_executor_extra_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert main(["run", "cpu-demo"]) == 2
    line = _one_error_line(capsys)
    assert "torch" in line and "pip install" in line and "rlix[exec]" in line


def test_a_bad_policy_blames_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["run", "cpu-demo", "--policy", "nope"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--policy" in err and "nope" in err and "scenario" not in err.split("error:")[-1]


def _kill(home: Path, *args: str) -> tuple[int, str, float]:
    started = time.monotonic()
    done = subprocess.run([*RLIX_EXEC, "kill", *args], env=child_env(home), capture_output=True, text=True, timeout=60)
    return done.returncode, done.stderr.strip(), time.monotonic() - started


def test_kill_with_no_run_says_so_within_seconds(tmp_path: Path) -> None:
    code, err, took = _kill(tmp_path, "ft")
    assert code == 2 and err.startswith("rlix-exec: error: no running rlix run") and took < 15, (err, took)
    # a run that ended without cleaning up (its driver was killed): a dead pid, an address
    (tmp_path / ".rlix").mkdir()
    address_file = tmp_path / ".rlix" / "ray_address"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    address_file.write_text(json.dumps({"address": "127.0.0.1:9", "pid": dead.pid, "auth_mode": "token"}))
    code, err, took = _kill(tmp_path, "ft")
    assert code == 2 and "no running rlix run" in err and took < 15, (err, took)
    assert not address_file.exists()
    # a live driver whose Ray address answers nothing (its cluster is gone)
    address_file.write_text(json.dumps({"address": "127.0.0.1:9", "pid": os.getpid(), "auth_mode": "token"}))
    code, err, took = _kill(tmp_path, "ft")
    assert code == 2 and "nothing answers there" in err and took < 15, (err, took)


@contextmanager
def _mute_run(home: Path, speaks_grpc: bool = True) -> Iterator[None]:
    """A "run" on this machine whose address accepts connections and never speaks Ray: it
    answers a gRPC client's hello (an empty HTTP/2 SETTINGS frame), as a Ray head does, and
    nothing after; or, with `speaks_grpc` False, nothing at all."""
    import socket
    import threading

    held: list[socket.socket] = []
    stop = threading.Event()

    def serve(mute: socket.socket) -> None:
        while not stop.is_set():
            try:
                connection, _ = mute.accept()
            except OSError:
                continue
            held.append(connection)  # kept open, as a server that hangs
            if speaks_grpc:
                connection.sendall(bytes(3) + b"\x04" + bytes(5))

    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen()
        mute.settimeout(0.2)
        thread = threading.Thread(target=serve, args=(mute,), daemon=True)
        thread.start()
        (home / ".rlix").mkdir()
        record = {"address": f"127.0.0.1:{mute.getsockname()[1]}", "pid": os.getpid(), "auth_mode": "token"}
        (home / ".rlix" / "ray_address").write_text(json.dumps(record))
        try:
            yield
        finally:
            stop.set()
            thread.join(5)
            for connection in held:
                connection.close()


def test_kill_of_a_run_whose_address_is_not_ray_is_one_line_within_seconds(tmp_path: Path) -> None:
    """A listener that is no gRPC server at all is told apart before joining (which would wait
    for minutes)."""
    with _mute_run(tmp_path, speaks_grpc=False):
        code, err, took = _kill(tmp_path, "ft")
    assert code == 2 and err.count("\n") == 0 and "not a Ray cluster" in err and took < 15, (err, took)


def test_kill_without_the_token_is_one_line(tmp_path: Path) -> None:
    with _mute_run(tmp_path):
        code, err, _took = _kill(tmp_path, "ft")
    assert code == 2 and err.count("\n") == 0 and "no token was found" in err, err


def test_kill_obeys_ctrl_c_while_the_cluster_does_not_answer(tmp_path: Path) -> None:
    """Something listens at the address but never speaks Ray: joining would hang for minutes."""
    with _mute_run(tmp_path):
        (tmp_path / ".ray").mkdir()
        (tmp_path / ".ray" / "auth_token").write_text("0" * 64)
        process = subprocess.Popen([*RLIX_EXEC, "kill", "ft"], env=child_env(tmp_path), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        time.sleep(6)  # well into joining
        assert process.poll() is None
        sent = time.monotonic()
        process.send_signal(signal.SIGINT)
        _out, err = process.communicate(timeout=30)
    assert process.returncode == 130 and time.monotonic() - sent < 10, err
    assert "rlix-exec: interrupted" in err.splitlines()  # Ray's C++ threads may log after it


def _start_run(tmp_path: Path, out: Path, scenario: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*RLIX_EXEC, "run", scenario, "--quiet", "--out", str(out)], env=child_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for_file(path: Path, process: subprocess.Popen[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.2)


def _wait_for_record(journal: Path, process: subprocess.Popen[str], timeout_s: float) -> None:
    """Until the run's journal holds a piece of its record: the run is driving pipelines (a
    fixed sleep after Ray is up lands in the orchestrator's set-up on a loaded machine)."""
    deadline = time.monotonic() + timeout_s
    while not (journal.exists() and '"record"' in journal.read_text(encoding="utf-8")):
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, f"no record in {journal}"
        time.sleep(0.2)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_run_and_leaves_the_record(tmp_path: Path, signum: int) -> None:
    from rlix.runs.verify import replay

    out = tmp_path / "run"
    process = _start_run(tmp_path, out, str(short_demo_file(tmp_path)))
    _wait_for_record(tmp_path / ".run.live" / "journal.jsonl", process, 180)  # the run is under way
    time.sleep(2)
    sent = time.monotonic()
    process.send_signal(signum)
    output, _ = process.communicate(timeout=90)
    took = time.monotonic() - sent
    name = signal.Signals(signum).name
    assert process.returncode == 130, output
    assert took < 30, took
    assert "Traceback" not in output and f"{name}); the record so far is in {out}" in output, output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] is False and name in summary["stop_reason"]
    assert {p["state"] for p in summary["pipelines"].values()} <= {"stopped", "finished"}
    assert replay(out).identical
    assert not (tmp_path / ".rlix" / "ray_address").exists()  # the run is over: its address goes
    if signum == signal.SIGTERM:  # the stopped run goes on from where it stood, in its folder
        done = subprocess.run([*RLIX_EXEC, "resume", str(out), "--quiet"], env=child_env(tmp_path), capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        summary = json.loads((out / "summary.json").read_text())
        assert summary["finished"] is True
        assert {p["steps"] for p in summary["pipelines"].values()} == {SHORT_DEMO_STEPS, 2 * SHORT_DEMO_STEPS}
        assert replay(out).identical


def test_a_signal_as_soon_as_ray_is_up_stops_the_run_cleanly(tmp_path: Path) -> None:
    """A SIGTERM as soon as Ray is up (before or while the orchestrator starts, seconds on a
    busy machine) stops the run with its (empty) record instead of leaving the driver to
    Ray's handler, which aborts it with a stack dump."""
    out = tmp_path / "run"
    process = _start_run(tmp_path, out, str(short_demo_file(tmp_path)))
    _wait_for_file(tmp_path / ".rlix" / "ray_address", process, 120)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=90)
    assert process.returncode == 130, output
    assert f"SIGTERM); the record so far is in {out}" in output, output
    assert json.loads((out / "summary.json").read_text())["finished"] is False


def test_kill_reaches_a_live_run_with_token_auth_on(tmp_path: Path) -> None:
    """Ray turns token auth on for a new local cluster; `kill` must join with it, not around it."""
    out = tmp_path / "run"
    process = _start_run(tmp_path, out, str(short_demo_file(tmp_path)))
    try:
        _wait_for_file(tmp_path / ".rlix" / "ray_address", process, 120)
        assert json.loads((tmp_path / ".rlix" / "ray_address").read_text())["auth_mode"] == "token"
        deadline = time.monotonic() + 120
        while True:  # until both pipelines are launched
            code, err, took = _kill(tmp_path, "nosuch")
            assert code == 2 and "InvalidAuthToken" not in err and took < 30, (err, took)
            if err == "rlix-exec: error: no pipeline nosuch in this run (its pipelines: ft, lora)":
                break
            assert err.startswith("rlix-exec: error: no pipeline nosuch in this run"), err
            assert time.monotonic() < deadline, err
        done = subprocess.run([*RLIX_EXEC, "kill", "lora"], env=child_env(tmp_path), capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0 and done.stdout.strip() == "pipeline lora: killed", done
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=90)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pipelines"]["lora"]["state"] == "killed"
    assert summary["pipelines"]["lora"]["state_reason"] == "killed on request"


def test_a_dead_orchestrator_leaves_the_record_so_far(ray_session: Any, tmp_path: Path) -> None:
    from rlix.executor.live import execute
    from rlix.executor.orchestrator import ORCHESTRATOR_NAME
    from rlix.executor.run import plan
    from rlix.executor.session import NAMESPACE
    from rlix.runs.verify import replay
    from rlix.scenarios.load import validate_scenario

    stop = threading.Event()

    def kill_orchestrator() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not stop.is_set():
            try:
                handle = ray.get_actor(ORCHESTRATOR_NAME, namespace=NAMESPACE)
                if sum(ray.get(handle.run_progress.remote())["steps"].values()) >= 1:
                    time.sleep(2.0)  # the driver's copy is pulled every half second
                    ray.kill(handle)
                    return
            except (ValueError, ray.exceptions.RayActorError):
                pass
            time.sleep(0.5)

    killer = threading.Thread(target=kill_orchestrator, daemon=True)
    killer.start()
    try:
        result = execute(plan(validate_scenario(two_gpu_demo(12))), out_dir=tmp_path / "run", quiet=True, timeout_s=300)
    finally:  # a thread still calling Ray after the test would start Ray again on its own
        stop.set()
        killer.join()
    assert not result.finished and "orchestrator" in result.stop_reason
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["finished"] is False and "orchestrator" in summary["stop_reason"]
    assert sum(p["steps"] for p in summary["pipelines"].values()) >= 1  # what was done is kept
    assert replay(tmp_path / "run").identical


def test_a_run_folder_that_cannot_be_written_at_the_end_goes_to_a_fallback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlix.executor import live
    from rlix.runs import folder
    from rlix.scenarios import load_scenario
    from tests.runs.fake_run import two_pipeline_run

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    real = folder.write_run
    calls: list[Path] = []

    def full_disk_once(recorder: Any, out_dir: Path, **kwargs: Any) -> Path:
        calls.append(Path(out_dir))
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return real(recorder, out_dir, **kwargs)

    monkeypatch.setattr(folder, "write_run", full_disk_once)
    result = live.RunResult(None, {}, two_pipeline_run(), 1.0)
    the_plan = type("P", (), {"scenario": load_scenario("cpu-demo")})()
    live._write(result, tmp_path / "wanted", the_plan, overwrite=False)  # type: ignore[arg-type]
    assert "No space left" in result.write_error and str(tmp_path / "wanted") in result.write_error
    assert result.out_dir is not None and result.out_dir.parent == tmp_path / "cache" / "rlix" / "unsaved"
    assert (result.out_dir / "summary.json").exists()


def test_a_driver_failure_still_writes_the_record_then_raises(ray_session: Any, tmp_path: Path) -> None:
    """Anything else that cuts the run short (here its time limit) gets the record written
    before it is raised."""
    from rlix.executor.live import execute
    from rlix.executor.run import plan
    from rlix.runs.verify import replay
    from rlix.scenarios.load import validate_scenario

    with pytest.raises(TimeoutError, match="did not finish within") as raised:
        execute(plan(validate_scenario(two_gpu_demo(12))), out_dir=tmp_path / "run", quiet=True, timeout_s=3)
    assert raised.value.__notes__ == [f"the record so far is in {tmp_path / 'run'}"]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["finished"] is False and "TimeoutError" in summary["stop_reason"]
    assert replay(tmp_path / "run").identical


def test_a_dead_address_is_one_line_within_seconds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Ray would retry a dead address for minutes; a resume refused so leaves its run as it was."""
    from rlix.executor.journal import JournalWriter

    started = time.monotonic()
    assert main(["run", "cpu-demo", "--quiet", "--address", "127.0.0.1:1", "--out", str(tmp_path / "new")]) == 2
    assert "nothing answers there" in _one_error_line(capsys)
    run = tmp_path / "cut"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"finished": False}))
    JournalWriter(run / "journal.jsonl", "scenario", "v").close()
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert main(["resume", str(run), "--quiet", "--address", "127.0.0.1:1"]) == 2
    assert "nothing answers there" in _one_error_line(capsys)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    assert time.monotonic() - started < 60


def test_a_run_length_the_executor_would_not_keep_is_refused(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from rlix.scenarios import load_scenario

    scenario = tmp_path / "cut.yaml"
    scenario.write_text(load_scenario("cpu-demo").to_yaml() + "max_time_s: 12\n")
    assert main(["run", str(scenario), "--quiet", "--out", str(tmp_path / "run")]) == 2
    assert "max_time_s: 12 s cuts a simulated run" in _one_error_line(capsys)
    assert not (tmp_path / "run").exists()


def test_a_scenario_kill_is_a_failed_job_with_its_reason(ray_session: Any, tmp_path: Path) -> None:
    """The scenario's fault kills lora at 5 s: its state says why, and the job figures count it
    as failed (no JCT), ft alone as finished."""
    from rlix.executor.live import execute
    from rlix.executor.run import plan
    from rlix.runs.verify import replay
    from rlix.scenarios.load import validate_scenario

    data = two_gpu_demo(6)
    data["faults"] = {"events": [{"at_s": 5.0, "kill": "lora"}]}
    result = execute(plan(validate_scenario(data)), out_dir=tmp_path / "run", quiet=True, timeout_s=300)
    assert result.finished
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    lora = summary["pipelines"]["lora"]
    assert (lora["state"], lora["state_reason"], lora["jct_s"]) == ("killed", "killed by the scenario's faults at 5 s",
                                                                   None)
    assert lora["finish_s"] is not None and summary["pipelines"]["ft"]["jct_s"] is not None
    assert (summary["overall"]["jobs"]["finished"], summary["overall"]["jobs"]["failed"]) == (1, 1)
    assert replay(tmp_path / "run").identical
