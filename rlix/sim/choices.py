"""Comma-separated choices on a command line: bundled scenarios and policies, checked as parsed.

Each is an argparse type function, so a bad name is reported with the option it came from
before any work starts (``argument --policies: unknown foo (known: gap-ratio, rlix, ...)``);
`rlix-sim compare` and the benches in bench/ share them.
"""

from __future__ import annotations

import argparse


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def policy_names(text: str) -> list[str]:
    """One or more known policies, separated by commas."""
    from rlix.policy.policies import POLICIES

    names = _names(text)
    unknown = [name for name in names if name not in POLICIES]
    if unknown or not names:
        problem = f"unknown {', '.join(unknown)}" if unknown else "give at least one"
        raise argparse.ArgumentTypeError(f"{problem} (known: {', '.join(sorted(POLICIES))})")
    return names


def bundled_scenario_names(text: str) -> list[str]:
    """One or more bundled scenarios, separated by commas."""
    from rlix.scenarios import bundled_scenarios

    names = _names(text)
    unknown = [name for name in names if name not in bundled_scenarios()]
    if unknown or not names:
        problem = f"unknown {', '.join(unknown)}" if unknown else "give at least one"
        raise argparse.ArgumentTypeError(f"{problem} (bundled: {', '.join(bundled_scenarios())})")
    return names
