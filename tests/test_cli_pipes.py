"""`rlix-sim` as a shell sees it: every sub-command ends quietly when its output pipe closes early
(`rlix-sim ... | head`), and bad input from any sub-command is one line with status 2.

The pipe tests run the real entry point in a subprocess whose stdout is closed before it writes.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlix.policy.errors import SpecError
from rlix.sim.cli import (
    BAD_INPUT_STATUS,
    BROKEN_PIPE_STATUS,
    UsageError,
    build_parser,
    main,
    run_command,
)
from rlix.traces import TraceError, generate, write_trace


def sub_commands() -> list[str]:
    """Every sub-command registered with `rlix-sim`, today's and those added later."""
    parser = build_parser()
    (table,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(table.choices)


def run_into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """Start `rlix-sim ARGS...` with a stdout pipe whose reader is gone before it writes."""
    env = {k: v for k, v in os.environ.items() if k != "RLIX_DEBUG"}
    process = subprocess.Popen(
        [sys.executable, "-m", "rlix.sim.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    process.stdout.close()  # the interpreter takes far longer to start than this
    _, err = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, "", err)


class ClosedPipe(io.StringIO):
    """A stdout whose reader has gone: every write and flush raises BrokenPipeError."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_trace(generate("math", 600, seed=1), tmp_path_factory.mktemp("t") / "t.csv")


# A real pipe for a few commands (each subprocess imports pandas: seconds on a busy machine);
# the in-process tests below cover the rest.
@pytest.mark.parametrize(
    "args",
    [
        ["trace", "inspect", "{trace}"],
        ["demo", "--quiet", "--policies", "static", "--no-alone", "--out", "{tmp}/demo"],
        ["--help"],
    ],
)
def test_closed_stdout_pipe_ends_quietly(trace_file: Path, args: list[str]) -> None:
    names = {"trace": trace_file, "tmp": trace_file.parent}
    done = run_into_closed_pipe(*[a.format(**names) for a in args])
    assert (done.returncode, done.stderr) == (BROKEN_PIPE_STATUS, "")


@pytest.mark.parametrize(
    "args",
    [
        ["trace", "inspect", "{trace}", "--json"],
        ["trace", "generate", "agentic", "--rows", "100", "--out", "{tmp}/g.parquet"],
        ["trace", "fit", "{summary}", "--samples-per-step", "50", "--out", "{tmp}/f.csv"],
    ],
)
def test_closed_stdout_in_process(
    trace_file: Path, tmp_path: Path, args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = tmp_path / "summary.csv"
    summary.write_text("mean,max,clip_ratio\n900,4096,0.01\n")
    names = {"trace": trace_file, "tmp": tmp_path, "summary": summary}
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main([a.format(**names) for a in args]) == BROKEN_PIPE_STATUS


def test_every_sub_command_help_into_a_closed_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    names = sub_commands()
    assert {"trace", "demo"} <= set(names)
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    for name in names:
        assert (name, main([name, "--help"])) == (name, BROKEN_PIPE_STATUS)
    assert main(["trace", "inspect", "--help"]) == BROKEN_PIPE_STATUS


def every_parser(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """`parser` and every sub-command parser under it, at any depth."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases map to one parser
                found += every_parser(sub)
    return found


def test_no_help_text_shows_formatting_marks() -> None:
    # argparse %-formats argument help but not a description without %(prog)s: a '%%' written
    # in a description shows as '%%'.
    parsers = every_parser(build_parser())
    assert {"rlix-sim trace inspect", "rlix-sim demo"} <= {p.prog for p in parsers}
    for parser in parsers:
        text = parser.format_help()
        assert "%%" not in text and "%(" not in text, parser.prog


def raising(error: BaseException, **options: object) -> argparse.Namespace:
    """Parsed arguments of a sub-command whose run raises `error`."""

    def run(args: argparse.Namespace) -> int:
        raise error

    return argparse.Namespace(run=run, **options)


@pytest.mark.parametrize(
    "error",
    [
        TraceError("no such file", file="x.csv"),
        SpecError("tp", 3, "does not divide the mapping length 8"),
        UsageError("--steps 99: the bundled traces hold 8 steps"),
        MemoryError("Unable to allocate 745. GiB"),
    ],
)
def test_bad_input_from_any_sub_command_is_one_line(
    error: Exception, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RLIX_DEBUG", raising=False)
    assert run_command(raising(error)) == BAD_INPUT_STATUS
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("rlix-sim: error: ") and str(error) in err


def test_traceback_on_request_and_for_bugs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLIX_DEBUG", raising=False)
    with pytest.raises(TraceError):
        run_command(raising(TraceError("bad"), traceback=True))
    with pytest.raises(RuntimeError):  # not bad input: a bug keeps its traceback
        run_command(raising(RuntimeError("bug")))
    monkeypatch.setenv("RLIX_DEBUG", "1")
    with pytest.raises(UsageError):
        run_command(raising(UsageError("bad")))


def test_bad_argument_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["trace", "generate", "nonsense", "--out", "x.csv"])
    assert done.value.code == BAD_INPUT_STATUS
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage:" not in err
    assert err.startswith("rlix-sim trace generate: error: argument kind: invalid choice")
    assert err.rstrip().endswith("(see rlix-sim trace generate --help)")


def test_out_of_memory_is_one_line_that_says_so(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A MemoryError most often has no message: the line says so rather than showing "()"."""
    monkeypatch.delenv("RLIX_DEBUG", raising=False)
    assert run_command(raising(MemoryError())) == BAD_INPUT_STATUS
    err = capsys.readouterr().err
    assert err.strip() == "rlix-sim: error: out of memory, the input asks for too much (no detail)", err
