"""A signal's exception raised inside a library callback comes out wrapped in the library's
error (pydantic's serializer wrapped a SIGTERM that landed in a model dump, and the run exited
1 with a traceback): the command still stops as after the signal."""

from __future__ import annotations

import argparse

import pytest

from rlix.sim.cli import Terminated, run_command


def _raising(signal_error: KeyboardInterrupt | None, chained: bool) -> argparse.Namespace:
    """A command that raises a RuntimeError from `signal_error` (explicitly chained, or raised
    while handling it), or with no signal behind it."""
    def run(args: argparse.Namespace) -> int:
        if signal_error is None:
            raise RuntimeError("a bug")
        try:
            raise signal_error
        except KeyboardInterrupt as caught:
            if chained:
                raise RuntimeError("Error calling function `_format_home`: Terminated") from caught
            raise RuntimeError("while cleaning up")  # noqa: B904 - the implicit chain is the case
    return argparse.Namespace(run=run)


@pytest.mark.parametrize("chained", [True, False], ids=["cause", "context"])
@pytest.mark.parametrize("signal_error", [Terminated(), KeyboardInterrupt()], ids=["sigterm", "ctrl-c"])
def test_a_wrapped_signal_stops_the_command_as_the_signal(signal_error: KeyboardInterrupt, chained: bool) -> None:
    with pytest.raises(type(signal_error)):
        run_command(_raising(signal_error, chained))


def test_an_error_without_a_signal_behind_it_is_not_one() -> None:
    with pytest.raises(RuntimeError, match="a bug"):
        run_command(_raising(None, False))
