"""Small traces shipped as package data for the simulator's bundled scenarios.

Each is produced by `rlix.traces.generate` from a fixed recipe, so the files can be checked
against a fresh generation and remade after a deliberate change to the generator:

    python -m rlix.traces.bundled --regenerate
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Final

import pandas as pd

from rlix.traces.errors import TraceError
from rlix.traces.generate import Kind, generate
from rlix.traces.io import read_trace, write_trace


@dataclass(frozen=True)
class Recipe:
    """How a bundled trace is generated."""

    kind: Kind
    rows: int
    seed: int
    pipeline: str
    max_tokens: int | None = None  # None: the kind's own cap

    def generate(self) -> pd.DataFrame:
        return generate(
            self.kind, self.rows, self.seed, pipeline=self.pipeline, max_tokens=self.max_tokens
        )


# 4096 rows: 16 agentic steps of 32 prompts × 8 samples, 8 math steps of 32 × 16; ~100 kB each.
BUNDLED: Final[dict[str, Recipe]] = {
    "agentic_small": Recipe(kind="agentic", rows=4096, seed=2024, pipeline="agentic"),
    "math_small": Recipe(kind="math", rows=4096, seed=2024, pipeline="math"),
    # math_small's draws under DAPO's 16,384-token cap (WORKLOADS.md) instead of 4,096: only the cap
    # differs, so the two isolate its effect. For the math-rlvr scenario.
    "math_16k": Recipe(kind="math", rows=4096, seed=2024, pipeline="math", max_tokens=16_384),
}


def bundled_names() -> list[str]:
    """Names of the bundled traces, e.g. ``["agentic_small", "math_small"]``."""
    return sorted(BUNDLED)


def load_bundled(name: str) -> pd.DataFrame:
    """Read bundled trace `name` from the installed package (validated like any trace)."""
    if name not in BUNDLED:
        raise TraceError(f"no bundled trace {name!r}; bundled: {', '.join(bundled_names())}")
    resource = resources.files("rlix.traces").joinpath("data", f"{name}.parquet")
    with resources.as_file(resource) as path:
        return read_trace(path)


def regenerate(directory: Path) -> list[Path]:
    """Write every bundled trace into `directory`; return the files written."""
    return [
        write_trace(recipe.generate(), directory / f"{name}.parquet")
        for name, recipe in sorted(BUNDLED.items())
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rlix.traces.bundled", description="List or remake the bundled traces."
    )
    parser.add_argument(
        "--regenerate",
        action="store_true",
        help="rewrite the files in rlix/traces/data from their recipes",
    )
    args = parser.parse_args(argv)
    if args.regenerate:
        for path in regenerate(Path(__file__).resolve().parent / "data"):
            print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    else:
        for name in bundled_names():
            print(f"{name}: {BUNDLED[name]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
