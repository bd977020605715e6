"""Imports point one way (DESIGN.md, Layout): `sim` and `executor` use `runs`, `pipelines`,
`scenarios`, `traces` and `policy`; `runs` uses `traces` and `policy`; nothing imports `sim`
from `executor` or the reverse; `studies` (sweeps, the simulator against live runs) may use both. Every import of every module counts, those inside functions too.

`KNOWN` lists the imports that break the rule today, each with why, so that no new one comes in
unseen; one that is gone must leave the list (`test_known_exceptions_still_exist`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RLIX = Path(__file__).resolve().parents[1] / "rlix"

#: Package -> the rlix packages its modules may import.
ALLOWED: dict[str, frozenset[str]] = {
    "policy": frozenset({"policy"}),
    "pipelines": frozenset({"pipelines", "policy"}),
    "traces": frozenset({"traces"}),
    "scenarios": frozenset({"scenarios", "pipelines", "traces", "policy"}),
    # The loop's Host runs the pipeline programs' ops (rlix.runs.host), so runs uses pipelines too.
    "runs": frozenset({"runs", "pipelines", "traces", "policy"}),
    "sim": frozenset({"sim", "runs", "pipelines", "scenarios", "traces", "policy"}),
    "executor": frozenset({"executor", "runs", "pipelines", "scenarios", "traces", "policy"}),
    # Studies put the drivers side by side (a sweep of simulator runs on Ray, the simulator's
    # predictions against live executor runs): the one package that may use both.
    "studies": frozenset({"studies", "sim", "executor", "runs", "pipelines", "scenarios", "traces", "policy"}),
}

#: (module, imported package): imports against the rule that exist today.
KNOWN: dict[tuple[str, str], str] = {
    ("sim/cli.py", "studies"): "`rlix-sim sweep` is rlix.studies' command",
    ("traces/cli.py", "runs"): "the trace commands check an output file as run folders do (rlix.runs.paths)",
}


def _imported_packages(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "rlix" and len(parts) > 1:
                found.add(parts[1])
    return found


def _breaches() -> dict[tuple[str, str], None]:
    out: dict[tuple[str, str], None] = {}
    for package, allowed in ALLOWED.items():
        for path in sorted((RLIX / package).rglob("*.py")):
            module = path.relative_to(RLIX).as_posix()
            for imported in sorted(_imported_packages(path) - allowed):
                out[(module, imported)] = None
    return out


def test_there_is_something_to_check() -> None:
    assert all(any((RLIX / package).rglob("*.py")) for package in ALLOWED)


def test_imports_point_one_way() -> None:
    new = [f"rlix/{module} imports rlix.{imported}" for module, imported in _breaches() if (module, imported) not in KNOWN]
    assert not new, "imports against DESIGN.md's layering: " + "; ".join(new)


@pytest.mark.parametrize("known", sorted(KNOWN), ids=lambda k: f"{k[0]}->{k[1]}")
def test_known_exceptions_still_exist(known: tuple[str, str]) -> None:
    assert known in _breaches(), f"rlix/{known[0]} no longer imports rlix.{known[1]}: take it out of KNOWN"
