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
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

#: The test files that start Ray (or a live run through the CLI): one unit of work, run first.
RAY_TESTS = ("tests/executor/", "tests/notebooks/", "tests/studies/test_sweep.py", "tests/bench/test_exec_overhead.py")
RAY_UNIT = "ray"


def _unit(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return RAY_UNIT if path.startswith(RAY_TESTS) else path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: _unit(item.nodeid) != RAY_UNIT)  # stable: the Ray unit first


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, when it is installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class RayApart(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    return RayApart(config, log)
