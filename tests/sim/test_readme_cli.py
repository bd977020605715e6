"""The README's `rlix-sim` block agrees with the command line: it names every sub-command, and
the default compare folder it gives is the one `compare --help` gives (the scenario's name,
not the SCENARIO argument, which may be a YAML path)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from rlix.sim.cli import build_parser

README = Path(__file__).resolve().parents[2] / "README.md"


def _cli_block() -> str:
    found = re.search(r"```\n(rlix-sim run SCENARIO.*?)```", README.read_text(), re.S)
    assert found, "README.md has no rlix-sim block (a ``` block starting `rlix-sim run SCENARIO`)"
    return found.group(1)


def _sub_parsers() -> dict[str, argparse.ArgumentParser]:
    (table,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(table.choices)


def test_the_readme_names_every_sub_command() -> None:
    named = set(re.findall(r"^rlix-sim (\S+)", _cli_block(), re.M))
    assert named == set(_sub_parsers())


def test_the_readme_gives_the_default_compare_folder_as_the_help_does() -> None:
    (line,) = (line for line in _cli_block().splitlines() if line.startswith("rlix-sim compare "))
    readme = re.search(r"\((runs/[^)]*)\)", line)
    assert readme, line
    help_text = " ".join(_sub_parsers()["compare"].format_help().split())
    assert f"default {readme.group(1)})" in help_text, readme.group(1)
