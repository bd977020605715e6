"""rlix.policy is pure: standard library only, and no clock, randomness, threads or I/O."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

POLICY = Path(__file__).resolve().parents[2] / "rlix" / "policy"
FILES = sorted(POLICY.rglob("*.py"))
#: Modules that would give the core a clock, randomness, threads or I/O, or a way round this
#: list (`sys.stdout`, `importlib.import_module("time")`, `builtins.open`).
IMPURE = {"time", "datetime", "random", "secrets", "threading", "multiprocessing", "asyncio",
          "socket", "subprocess", "os", "io", "pathlib", "shutil", "tempfile", "logging", "uuid",
          "sys", "importlib", "builtins", "ctypes", "signal", "select", "selectors", "mmap",
          "concurrent", "_thread", "sched", "urllib", "http", "ssl", "sqlite3", "shelve", "glob",
          "fileinput", "platform", "resource", "gc", "atexit", "faulthandler", "zoneinfo", "fcntl"}
#: Built-in calls that do I/O, or import or run code this test never sees.
IMPURE_CALLS = {"open", "print", "input", "breakpoint", "__import__", "eval", "exec", "compile"}


def imports_of(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_there_is_something_to_check() -> None:
    assert len(FILES) >= 10


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_standard_library_only(path: Path) -> None:
    allowed = set(sys.stdlib_module_names) | {"__future__"}
    for name in imports_of(path):
        top = name.split(".")[0]
        assert top in allowed or name.startswith("rlix.policy"), f"{path.name} imports {name}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_clock_randomness_threads_or_io(path: Path) -> None:
    for name in imports_of(path):
        assert name.split(".")[0] not in IMPURE, f"{path.name} imports {name}"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in IMPURE_CALLS, f"{path.name} calls {node.func.id}"
