"""rlix.pipelines is pure like rlix.policy: standard library only, no clock, randomness,
threads or I/O (the programs run unchanged in the simulator and the executor)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from tests.policy.test_purity import IMPURE, IMPURE_CALLS, imports_of

PIPELINES = Path(__file__).resolve().parents[2] / "rlix" / "pipelines"
FILES = sorted(PIPELINES.rglob("*.py"))


def test_there_is_something_to_check() -> None:
    assert len(FILES) >= 4


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_standard_library_and_the_core_only(path: Path) -> None:
    allowed = set(sys.stdlib_module_names) | {"__future__"}
    for name in imports_of(path):
        top = name.split(".")[0]
        assert top in allowed or name.startswith(("rlix.pipelines", "rlix.policy")), f"{path.name} imports {name}"
        assert name.split(".")[0] not in IMPURE, f"{path.name} imports {name}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_io_calls(path: Path) -> None:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in IMPURE_CALLS, f"{path.name} calls {node.func.id}"
