"""Every `rlix-sim` sub-command's --help shows a command line that runs it: an example of
itself, beyond the usage block (a newcomer copies one before reading the options)."""

from __future__ import annotations

import argparse
import re

import pytest

from rlix.sim.cli import build_parser


def _sub_parsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (table,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(table.choices)


@pytest.mark.parametrize("name", sorted(_sub_parsers()))
def test_each_sub_command_help_has_an_example_of_itself(name: str) -> None:
    parser = _sub_parsers()[name]
    body = parser.format_help()[len(parser.format_usage()):]
    assert re.search(rf"(^|\s)rlix-sim {re.escape(name)}(\s|$)", body), f"no example in `rlix-sim {name} --help`"


def test_the_top_level_help_points_at_a_first_command_that_exists() -> None:
    """`rlix-sim --help`, a newcomer's first command, names one to run next, and it runs."""
    parser = build_parser()
    body = parser.format_help()[len(parser.format_usage()):]
    named = re.findall(r"rlix-sim (\w+)", body)
    assert named, "rlix-sim --help names no command to start with"
    assert set(named) <= set(_sub_parsers())
