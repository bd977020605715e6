"""Settings for every test: hypothesis draws the same examples on every CI run, and the live
tests run on one worker of two.

Locally each run draws new examples (and keeps failing ones in its database), which is how
property tests find rare bugs; on CI (`CI` set) the draw is derandomized, so a result is the
code's, not the luck of one run's seed. Examples per property: RLIX_HYPOTHESIS_EXAMPLES.

`scripts/test.sh` runs the suite on two pytest-xdist workers (`-n 2 --dist loadgroup`). The
tests that start Ray (live runs, Ray sweeps) go to one worker, one after another and first,
since together they are the longest part and each starts processes that want the machine's
cores; two Ray clusters at once on a 2-core machine would only slow both. Every other test
module is one unit of work (its module fixtures computed once), taken by whichever worker is
free: those tests are single-threaded Python, so the second core runs them beside the live ones.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

#: The test files that start Ray (or a live run through the CLI): one group, run first.
RAY_TESTS = ("tests/executor/", "tests/notebooks/", "tests/studies/test_sweep.py", "tests/bench/test_exec_overhead.py")
RAY_GROUP = "ray"


def _group(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return RAY_GROUP if path.startswith(RAY_TESTS) else path


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item.nodeid)))
    items.sort(key=lambda item: _group(item.nodeid) != RAY_GROUP)  # stable: the Ray group first
