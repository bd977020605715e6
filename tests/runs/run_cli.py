"""The run-folder sub-commands (`rlix-sim check`, `replay`, ...) called as the CLI calls them."""

from __future__ import annotations

import argparse

from rlix.runs import cli as run_cli


def run_cli_main(*argv: str) -> int:
    """Parse `argv` as `rlix-sim` does for the run-folder commands and run it; its exit status."""
    parser = argparse.ArgumentParser(prog="rlix-sim")
    run_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    result: int = args.run(args)
    return result
