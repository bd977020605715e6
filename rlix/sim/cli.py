"""`rlix-sim`: the simulator's command line.

Sub-commands are registered by the modules that own them: `run` and `compare`
(rlix.sim.commands), `replay` (rlix.runs.replay), `trace` (rlix.traces.cli) and `demo`
(rlix.sim.demo). Errors on bad input print one line and exit non-zero.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlix-sim",
        description="Simulate several RL post-training pipelines sharing one GPU pool under an "
        "rlix policy, and work with rollout-length traces.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    from rlix.sim import commands as sim_commands
    from rlix.traces import cli as trace_cli

    sim_commands.register(commands)
    try:
        from rlix.runs import replay
    except ImportError:  # the run-folder reader lands with rlix.runs
        pass
    else:
        replay.register(commands)

    trace_cli.register(commands)
    try:
        from rlix.sim import demo
    except ImportError:  # demo lands with the policy core
        pass
    else:
        demo.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
