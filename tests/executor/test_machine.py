"""The machine meter (rlix.executor.machine): CPU demand of a run's own processes and of the
rest, weighted by nice, from /proc."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from rlix.executor.machine import (
    MachineMeter,
    machine_cpu_s,
    probe_background,
    role_of,
    runnable_demand,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

SPIN = "import time\nend = time.time() + 3\nwhile time.time() < end: pass\n"


def _spinning(nice: int = 0) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["nice", "-n", str(nice), sys.executable, "-c", SPIN])


def test_a_busy_process_of_the_run_is_its_own_demand() -> None:
    child = _spinning()
    try:
        time.sleep(0.3)
        samples = [runnable_demand({child.pid}) for _ in range(20) if not time.sleep(0.02)]
    finally:
        child.kill()
    own = [s[0] for s in samples if s is not None]
    assert sum(own) / len(own) > 0.5  # ready to run nearly all the time (2 cores, other work too)


def test_a_niced_process_weighs_less() -> None:
    child = _spinning(nice=10)
    try:
        time.sleep(0.3)
        own = [d[0] for _ in range(20) if (d := runnable_demand({child.pid})) is not None and not time.sleep(0.02)]
    finally:
        child.kill()
    assert max(own) <= 1.25**-10 + 1e-9


def test_the_meter_and_the_probe_say_what_they_measured() -> None:
    meter = MachineMeter()
    for _ in range(3):
        meter.sample()
    result = meter.result()
    assert result["samples"] == 3 and result["own_demand"] >= 0 and result["background_demand"] >= 0
    assert result["cores"] >= 1
    probed = probe_background(0.2)
    assert probed is not None and probed >= 0


def test_the_meter_counts_the_cpu_its_processes_used() -> None:
    """A child that spins ~1 s of CPU is counted (its own CPU time, read through psutil), and
    the machine was busy while it spun; a meter that only slept counts next to nothing."""
    meter = MachineMeter()
    spin = subprocess.Popen([sys.executable, "-c", "import time\nend = time.process_time() + 1.0\n"
                             "while time.process_time() < end: pass\ntime.sleep(1.0)\n"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and spin.poll() is None:
            meter.sample()
            time.sleep(0.1)
    finally:
        spin.kill()
    result = meter.result()
    assert 0.9 <= result["own_cpu_s"] < 3.0  # the child's second, plus this process's sampling
    assert result["own_cores"] == pytest.approx(result["own_cpu_s"] / result["wall_s"], rel=0.05)
    assert result["machine_busy_share"] > 0.2  # one core of two spun for half the time, at least
    # the child's CPU under its role (a plain python: "other"), the sampling under the driver's
    roles = result["own_cpu_by_role_s"]
    assert set(roles) <= {"other", "driver"} and roles["other"] >= 0.9
    assert sum(roles.values()) == pytest.approx(result["own_cpu_s"])
    idle = MachineMeter()
    time.sleep(0.3)
    idle.sample()
    assert idle.result()["own_cpu_s"] < 0.5


def test_machine_cpu_counts_busy_and_total_time() -> None:
    first = machine_cpu_s()
    time.sleep(0.2)
    second = machine_cpu_s()
    assert first is not None and second is not None
    busy, total = second[0] - first[0], second[1] - first[1]
    # Both are tick counts over the clock rate: with every core busy for the whole sleep they
    # are equal, and their differences may round apart by a few ulps.
    assert 0 <= busy <= total + 1e-9 and total > 0


def test_a_process_role_is_told_from_its_command_line() -> None:
    assert role_of(["ray::RolloutWorker.generate"], False) == "rollout_worker"
    assert role_of(["ray::PipelineActor"], False) == "pipeline_actor"
    assert role_of(["ray::IDLE"], False) == "ray_worker"
    assert role_of(["/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet", "--x"], False) == "ray_system"
    assert role_of(["python", "-c", "pass"], False) == "other"
    assert role_of(["ray::Orchestrator"], True) == "driver"
