"""Settings for every test: hypothesis draws the same examples on every CI run, and the live
tests run on one worker of two.

Locally each run draws new examples (and keeps failing ones in its database), which is how
property tests find rare bugs; on CI (`CI` set) the draw is derandomized, so a result is the
code's, not the luck of one run's seed. Examples per property: RLIX_HYPOTHESIS_EXAMPLES.

`scripts/test.sh` runs the suite on two pytest-xdist workers (`-n 2 --dist loadscope`). The
tests that start Ray (live runs, Ray sweeps) are one unit of work, so one worker runs them one
after another, and first: together they are the longest part, and each starts processes that
want the machine's cores (two Ray clusters at once on a 2-core machine would only slow both).
Every other test module is a unit of its own (its module fixtures computed once), taken by
whichever worker is free: those tests are single-threaded Python, so the second core runs them
beside the live ones. (Not xdist's `loadgroup`: with pytest 9.2 its group marks are lost.)
Those end minutes before the Ray unit does, so some files that start Ray (`RAY_LATE`) are
left out of it and queued last, a unit each: whichever worker is free takes the next one.

Ray starts its worker processes (the live runs' trainers, rollout workers, pipeline actors) at
nice 15, so a worker running the rest at nice 0 took the CPU from them: the live tests, the
suite's critical path, ran up to twice as long beside it. The worker that starts with a test
outside the Ray unit (it never gets that unit: the unit goes whole to the other worker, first)
lowers itself to nice 19 and runs in the gaps the live runs leave. Its tests then see their CPU
come and go, so under xdist hypothesis sets no deadline and skips the too-slow health check.
When it reaches the late Ray files it takes back nice 0 (if it may: that needs root).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

#: Under pytest-xdist, set before collection: a test's @settings inherit what is loaded then.
UNDER_XDIST: dict[str, Any] = (
    {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]} if "PYTEST_XDIST_WORKER" in os.environ else {})
settings.register_profile("ci", derandomize=True, database=None, **UNDER_XDIST)
settings.register_profile("xdist", **UNDER_XDIST)
if os.environ.get("CI"):
    settings.load_profile("ci")
elif UNDER_XDIST:
    settings.load_profile("xdist")

#: The nice level of the worker that runs the tests outside the Ray unit (Ray's workers: 15).
REST_NICE = 19

#: The test files that start Ray (or a live run through the CLI): one unit of work, run first.
RAY_TESTS = ("tests/executor/", "tests/notebooks/", "tests/studies/test_sweep.py", "tests/bench/test_exec_overhead.py")
RAY_UNIT = "ray"
#: Test files that start Ray too but run last, each a unit of its own, taken by whichever worker
#: is free: the rest of the suite ends minutes before the Ray unit, and these fill that time.
RAY_LATE = (
    "tests/executor/test_operating.py", "tests/executor/test_drain.py", "tests/executor/test_orchestrator.py",
    "tests/executor/test_api_misuse.py", "tests/executor/test_joined_kill.py", "tests/executor/test_multinode.py",
    "tests/executor/test_session_address.py", "tests/studies/test_sweep.py", "tests/studies/test_sweep_cluster.py",
)
LATE_PREFIX = "ray-late:"


def _unit(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    if path in RAY_LATE:
        return LATE_PREFIX + path
    return RAY_UNIT if path.startswith(RAY_TESTS) else path


def _order(item: pytest.Item) -> int:
    unit = _unit(item.nodeid)
    return 0 if unit == RAY_UNIT else 2 if unit.startswith(LATE_PREFIX) else 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_order)  # stable: the Ray unit first, the late Ray files last


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, when it is installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class RayApart(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    return RayApart(config, log)


_first_test_seen = False


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    global _first_test_seen
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    unit = _unit(item.nodeid)
    if not _first_test_seen:
        _first_test_seen = True
        if unit != RAY_UNIT:
            os.nice(REST_NICE - os.nice(0))
    elif unit.startswith(LATE_PREFIX) and os.getpriority(os.PRIO_PROCESS, 0) > 0:
        # The late Ray files run beside the Ray unit's last files, as equals: each live run
        # has timeouts that a run at nice 19 against Ray's workers at 15 might miss. Raising
        # a priority needs root; without it they run niced, only slower.
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, 0, 0)
