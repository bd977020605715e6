"""`rlix-sim replay RUN_DIR` and `rlix-sim check RUN_DIR`: verify a written run folder.

`register` adds both commands to a sub-command table (as rlix.traces.cli does). Exit status:
0 identical / all invariants hold; 1 a divergence or a broken invariant (printed); 2 bad input
(one line, ``rlix-sim: error: ...``; ``--traceback`` or ``RLIX_DEBUG=1`` shows the traceback).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable

from rlix.policy.errors import InvariantViolation
from rlix.runs.errors import RunError
from rlix.traces.errors import TraceError

Command = Callable[[argparse.Namespace], int]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `replay` and `check` to the `rlix-sim` sub-command table."""
    replay = subparsers.add_parser(
        "replay",
        help="replay a run's events through a fresh core and compare the decisions",
        description="Feed every event of RUN_DIR/events.jsonl to a new policy core built from "
        "the log's header and compare its decisions with the recorded ones, field by field. "
        "Prints the first divergence (line, event, recorded and replayed decisions) and exits 1, "
        "or exits 0 if every decision is identical.",
    )
    replay.add_argument("run_dir", metavar="RUN_DIR", help="a run folder written by rlix-sim or rlix-exec")
    replay.add_argument("--check-invariants", action="store_true",
                        help="also check the core's invariants after every round (slower)")
    _traceback_option(replay)
    replay.set_defaults(run=_guarded(main_replay))
    check = subparsers.add_parser(
        "check",
        help="check a run's tables against the invariants a record can show",
        description="Check RUN_DIR's allocations and rollouts: one holder per GPU at a time, "
        "holdings that match their cluster's mapping or bundle, the staleness bound of every "
        "consumed trajectory, and no lost trajectory. Exits 1 on the first broken invariant.",
    )
    check.add_argument("run_dir", metavar="RUN_DIR", help="a run folder")
    _traceback_option(check)
    check.set_defaults(run=_guarded(main_check))


def main_replay(args: argparse.Namespace) -> int:
    from rlix.runs.verify import replay

    result = replay(args.run_dir, check_invariants=args.check_invariants)
    print(result)
    return 0 if result.identical else 1


def main_check(args: argparse.Namespace) -> int:
    from rlix.runs.verify import check

    try:
        num_allocations, num_rollouts = check(args.run_dir)
    except InvariantViolation as violation:
        print(f"{args.run_dir}: {violation}")
        return 1
    held = [] if num_allocations is None else [f"1, 2 hold over {num_allocations} allocations"]
    if num_rollouts is not None:
        held.append(f"7, 8 hold over {num_rollouts} rollout attempts")
    missing = [name for name, num in (("allocations", num_allocations), ("rollouts", num_rollouts)) if num is None]
    unchecked = f"not checked: {', '.join(missing)} (the folder was written without them)" if missing else ""
    print(f"{args.run_dir}: invariants {'; '.join(held + [unchecked] if unchecked else held)}")
    return 0


def _traceback_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--traceback", action="store_true",
                        help="on error, show the Python traceback (also: RLIX_DEBUG=1)")


def _guarded(command: Command) -> Command:
    """Bad input (an unreadable folder, log or table) is one line on stderr and status 2."""

    @functools.wraps(command)
    def guarded(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except (RunError, TraceError) as error:
            if args.traceback or os.environ.get("RLIX_DEBUG") == "1":
                raise
            print(f"rlix-sim: error: {error}", file=sys.stderr)
            return 2

    return guarded
