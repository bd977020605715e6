"""Comma-separated choices on a command line: bundled scenarios and policies, checked as parsed.

Each is an argparse type function, so a bad name is reported with the option it came from
before any work starts (``argument --policies: unknown foo (known: gap-ratio, rlix, ...)``);
`rlix-sim compare` and the benches in bench/ share them, and the benches that study a few
bundled scenarios over seeds share `add_study_arguments`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rlix.traces.options import positive_int


def _names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    # Refused, not run twice: a name given twice is a typo, and each run of it costs its time.
    twice = [name for name in dict.fromkeys(names) if names.count(name) > 1]
    if twice:
        raise argparse.ArgumentTypeError(f"given twice: {', '.join(twice)}")
    return names


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


def add_study_arguments(parser: argparse.ArgumentParser, scenarios: Sequence[str]) -> None:
    """--scenarios (default `scenarios`), --policies (default rlix), --seeds (8) and --workers
    (2): the options of a bench that runs bundled scenarios under policies over seeds."""
    parser.add_argument("--scenarios", type=bundled_scenario_names, default=",".join(scenarios),
                        help=f"bundled scenarios, separated by commas (default: {','.join(scenarios)})")
    parser.add_argument("--policies", type=policy_names, default="rlix", help="policies, separated by commas (default: rlix)")
    parser.add_argument("--seeds", type=positive_int, default=8, metavar="N", help="seeds 0..N-1 (default 8)")
    parser.add_argument("--workers", type=positive_int, default=2, help="processes (default 2)")


def means_over_seeds(num_seeds: int) -> str:
    """A table's caption for figures over seeds 0..num_seeds-1: "means over seeds 0-7", or
    "seed 0" when there is one (a mean of one run is that run)."""
    return "seed 0" if num_seeds == 1 else f"means over seeds 0-{num_seeds - 1}"
