"""`rlix-sim`: the simulator's command line.

Sub-commands are registered by the modules that own them: `run`, `compare` and `demo` (compare
on a small scenario; rlix.sim.commands), `replay` and `check` (rlix.runs.cli), `trace`
(rlix.traces.cli) and `sweep` (rlix.studies.cli). `main` treats every sub-command alike, so a new one needs only `register`:

- bad input, an exception of a class in `user_errors()` (TraceError, the policy core's
  FieldError, ScenarioError, RunError, UsageError), prints one line, ``rlix-sim: error: ...``,
  and exits with status 2; ``--traceback`` (where a sub-command offers it) or ``RLIX_DEBUG=1``
  shows the Python traceback instead. Anything else is a bug and keeps its traceback;
- a bad argument prints one line naming it (argparse's usage block is left to ``--help``) and
  exits with status 2;
- output into a pipe closed early (``rlix-sim ... | head``) ends quietly with status 141, what a
  shell reports for a command ended by SIGPIPE; Ctrl-C ends quietly with status 130, SIGTERM
  with 143, both removing what a run had half written.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

from rlix.traces.options import UsageError

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

__all__ = ["UsageError", "build_parser", "main", "run_command", "user_errors"]

BAD_INPUT_STATUS = 2
BROKEN_PIPE_STATUS = 141  # 128 + SIGPIPE
INTERRUPTED_STATUS = 130  # 128 + SIGINT
TERMINATED_STATUS = 143  # 128 + SIGTERM


def user_errors() -> tuple[type[Exception], ...]:
    """The exception classes that mean bad input: one line and status 2, not a traceback."""
    # Imported here, only when something went wrong: the happy path does not pay for them.
    from rlix.policy.errors import FieldError
    from rlix.runs.errors import RunError
    from rlix.scenarios.errors import ScenarioError
    from rlix.traces.errors import TraceError

    return (UsageError, TraceError, FieldError, ScenarioError, RunError)


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line; sub-parsers made from it are the same kind."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        self.exit(BAD_INPUT_STATUS, f"{self.prog}: error: {text} (see {self.prog} --help)\n")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        # argparse reports arguments no parser took from the top parser ("see rlix-sim
        # --help", which lists only the sub-commands); the sub-command's parser, whose --help
        # lists the options it does take, reports them instead.
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self._chosen(parsed).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def _chosen(self, parsed: argparse.Namespace) -> argparse.ArgumentParser:
        """The innermost sub-command parser that `parsed` went through (self if none)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                choices: dict[str, argparse.ArgumentParser] = action.choices
                chosen = choices.get(getattr(parsed, action.dest, None) or "")
                if isinstance(chosen, OneLineParser):
                    return chosen._chosen(parsed)
                if chosen is not None:
                    return chosen
        return self

    def print_help(self, file: SupportsWrite[str] | None = None) -> None:
        # argparse's own print_help swallows a closed pipe, so --help would exit 0 where every
        # other output exits 141; let `main` see it.
        (file or sys.stdout).write(self.format_help())


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="rlix-sim",
        description="Simulate several RL post-training pipelines sharing one GPU pool under an "
        "rlix policy, and work with rollout-length traces.",
        epilog="A first look: rlix-sim demo (every policy on a 4-GPU scenario, in seconds). "
        "Each command's --help (rlix-sim demo --help) says what it takes, with an example.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    from rlix.sim import commands as sim_commands
    from rlix.traces import cli as trace_cli

    sim_commands.register(commands)
    from rlix.runs import cli as runs_cli

    runs_cli.register(commands)

    trace_cli.register(commands)
    from rlix.studies import cli as studies_cli

    studies_cli.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `rlix-sim ARGV...`; return the exit status (see the module docstring)."""
    try:
        with terminate_like_interrupt():
            try:
                args = build_parser().parse_args(argv)
                return run_command(args)
            finally:
                # Flush here, not at exit, so a closed pipe is noticed while it can be handled.
                sys.stdout.flush()
    except BrokenPipeError:
        _point_stdout_at_devnull()
        return BROKEN_PIPE_STATUS
    except Terminated:
        return TERMINATED_STATUS
    except KeyboardInterrupt:
        return INTERRUPTED_STATUS


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the run is, so it cleans up as after a Ctrl-C (a streamed run's
    half-written folder goes) instead of dying where it stands."""


@contextmanager
def terminate_like_interrupt() -> Iterator[None]:
    def terminate(signum: int, frame: Any) -> None:
        raise Terminated

    try:
        previous = signal.signal(signal.SIGTERM, terminate)
    except ValueError:  # not the main thread: not ours to take
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_command(args: argparse.Namespace) -> int:
    """Call the sub-command's `run`; bad input becomes one line on stderr and status 2."""
    try:
        return int(args.run(args))
    except MemoryError as error:
        if _wants_traceback(args):
            raise
        _print_error(f"out of memory, the input asks for too much ({str(error) or 'no detail'})")
    except Exception as error:
        interrupt = _interrupt_behind(error)
        if interrupt is not None:  # a Ctrl-C or SIGTERM that a library wrapped in its own error
            raise interrupt from None
        if _wants_traceback(args) or not isinstance(error, user_errors()):
            raise
        _print_error(str(error))
    return BAD_INPUT_STATUS


def _interrupt_behind(error: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM (`Terminated`) that `error` was raised from, if any: a signal's
    exception raised inside a library's callback (pydantic's serializers) comes out wrapped in
    that library's error, and the run must still stop as after the signal."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def _wants_traceback(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "traceback", False)) or os.environ.get("RLIX_DEBUG") == "1"


def _print_error(message: str) -> None:
    print(f"rlix-sim: error: {' '.join(message.split())}", file=sys.stderr)


def _point_stdout_at_devnull() -> None:
    """Python flushes stdout again at exit; with the pipe gone that would print a warning."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real file descriptor (e.g. captured in tests)
        pass


if __name__ == "__main__":
    sys.exit(main())
