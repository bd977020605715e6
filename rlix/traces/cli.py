"""`rlix-sim trace ...`: inspect, generate and fit rollout-length traces from the command line.

`rlix.sim.cli` calls `register` with its sub-command table. Bad input raises TraceError, which
`rlix.sim.cli.main` prints as one line, ``rlix-sim: error: ...``, with exit status 2;
``--traceback`` or ``RLIX_DEBUG=1`` shows the Python traceback instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlix.traces.bundled import BUNDLED, bundled_names, load_bundled
from rlix.traces.errors import TraceError
from rlix.traces.fit import FitWarning, fit_trace
from rlix.traces.generate import KINDS, generate
from rlix.traces.io import FORMATS, UnknownSuffix, format_of, read_trace, write_trace
from rlix.traces.options import UsageError, non_negative_int, path_text, positive_int, row_count
from rlix.traces.stats import LengthStats, TraceStats, trace_stats

_RAW = argparse.RawDescriptionHelpFormatter

TRACE_EPILOG = """\
examples:
  rlix-sim trace inspect rollouts.parquet
  rlix-sim trace inspect azure_conv_2023.csv --column response_tokens=num_decode_tokens \\
      --column prompt_tokens=num_prefill_tokens
  rlix-sim trace generate agentic --rows 4096 --seed 1 --out agentic.parquet
  rlix-sim trace fit verl_summary.csv --out fitted.parquet

A trace is a table (CSV, JSONL or Parquet) with one row per rollout and at least a
response_tokens column; optional: prompt_tokens, pipeline, adapter, step, group, num_turns,
tool_time_s, capped. A run's rollouts table is itself a trace (its completed rows).
"""


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the `trace` command and its actions to the `rlix-sim` sub-command table."""
    trace = subparsers.add_parser(
        "trace",
        help="inspect, generate or fit rollout-length traces",
        description="Work with rollout-length traces: the files the simulator replays.",
        epilog=TRACE_EPILOG,
        formatter_class=_RAW,
    )
    actions = trace.add_subparsers(dest="trace_command", metavar="ACTION", required=True)
    _add_inspect(actions)
    _add_generate(actions)
    _add_fit(actions)


def _common() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--traceback",
        action="store_true",
        help="on error, show the Python traceback (also: RLIX_DEBUG=1)",
    )
    return parent


def _column_option(parser: argparse.ArgumentParser, example: str) -> None:
    parser.add_argument(
        "--column",
        action="append",
        default=[],
        metavar="NAME=SRC",
        help=f"take column NAME from the file's column SRC, e.g. {example} (repeatable)",
    )


def _add_inspect(actions: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = actions.add_parser(
        "inspect",
        parents=[_common()],
        formatter_class=_RAW,
        help="length statistics of a trace",
        description="Print rows, mean, p50/p90/p99/max of response_tokens, the share of tokens "
        "in the longest 10% of samples, the cap-hit share, and the same per pipeline.",
        epilog="examples:\n  rlix-sim trace inspect trace.parquet --json\n"
        "  rlix-sim trace inspect agentic_small\n"
        "  rlix-sim trace inspect azure_conv_2023.csv --column response_tokens=num_decode_tokens",
    )
    parser.add_argument(
        "file", metavar="FILE", type=path_text,
        help="trace file (.csv, .jsonl, .json, .parquet) or a bundled trace's name "
        f"({', '.join(bundled_names())})",
    )
    _column_option(parser, "response_tokens=GeneratedTokens")
    parser.add_argument("--format", choices=FORMATS, help="read as this format, not by suffix")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=_run_inspect)


def _add_generate(actions: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = actions.add_parser(
        "generate",
        parents=[_common()],
        formatter_class=_RAW,
        help="write a synthetic trace (agentic or math)",
        description="Write a seeded synthetic trace: `agentic` (long tail, ~40% of tokens in "
        "the longest 10%, 32k cap, multi-turn with tool time) or `math` (RLVR-like, lighter "
        "tail, 4k cap). The same seed gives the same file.",
        epilog="example:\n  rlix-sim trace generate agentic --rows 4096 --seed 1 "
        "--pipeline agent-a --out agentic.parquet",
    )
    parser.add_argument("kind", choices=KINDS, help="trace shape")
    parser.add_argument("--rows", type=row_count, default=4096, help="samples (default 4096, at most 10^8)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="random seed (default 0)")
    parser.add_argument("--pipeline", help="add a pipeline column with this name")
    parser.add_argument("--max-tokens", type=positive_int, help="length cap (default: the shape's)")
    _output_options(parser)
    parser.set_defaults(run=_run_generate)


def _add_fit(actions: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = actions.add_parser(
        "fit",
        parents=[_common()],
        formatter_class=_RAW,
        help="fit a trace to a per-step summary log (verl style)",
        description="Fit a capped lognormal per step to a summary log with per-step mean, max "
        "and clip ratio of response length (verl: response_length/mean, response_length/max, "
        "response_length/clip_ratio; or mean, max, clip_ratio), then sample a trace from it. "
        "A step whose logged mean the model cannot reach is fitted as near as it goes, and a "
        "warning names it with its logged and fitted mean.",
        epilog="example:\n  rlix-sim trace fit summary.csv --samples-per-step 8192 "
        "--out fitted.parquet\n  rlix-sim trace fit log.jsonl --column mean=len_mean "
        "--out fitted.csv",
    )
    parser.add_argument("summary", metavar="SUMMARY", type=path_text, help="summary log: .csv, .jsonl, .parquet")
    parser.add_argument(
        "--samples-per-step",
        type=positive_int,
        default=1024,
        help="samples per step, as in the logged run (prompts × group size; default 1024)",
    )
    parser.add_argument(
        "--max-tokens", type=positive_int, help="length cap (default: from the log)"
    )
    parser.add_argument("--seed", type=non_negative_int, default=0, help="random seed (default 0)")
    _column_option(parser, "mean=response_length_mean")
    _output_options(parser)
    parser.set_defaults(run=_run_fit)


def _output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, metavar="FILE", type=path_text, help="where to write the trace")
    parser.add_argument("--format", choices=FORMATS, help="write this format, not by suffix")


def _run_inspect(args: argparse.Namespace) -> int:
    path = Path(args.file)
    # A bare name that is no file (no folder, no suffix) is a bundled trace's name.
    if not path.exists() and path.name == args.file and not path.suffix:
        if args.file not in BUNDLED:
            raise TraceError(f"no such file, nor a bundled trace ({', '.join(bundled_names())})",
                             file=args.file)
        given = [option for option, value in (("--column", args.column), ("--format", args.format)) if value]
        if given:  # a bundled trace has rlix's columns and no file format: nothing to apply
            raise UsageError(f"{' and '.join(given)} {'are' if len(given) > 1 else 'is'} for a trace file; "
                             f"{args.file} is a bundled trace, already in rlix's columns")
        table = load_bundled(args.file)
    else:
        with _format_option_named():
            table = read_trace(args.file, args.column, args.format)
    stats = trace_stats(table)
    if args.json:
        print(json.dumps(stats.as_dict()))
    else:
        print(format_stats(args.file, stats))
    return 0


def _check_out(file: str, fmt: str | None) -> None:
    """The output file, checked before any work: a bad path or a suffix of no format is one
    line, nothing written."""
    # The CLI's layer may look up; the rlix.traces library itself stays below rlix.runs.
    from rlix.runs.paths import check_out_file

    check_out_file(file)
    with _format_option_named():
        format_of(file, fmt)


@contextmanager
def _format_option_named() -> Iterator[None]:
    """Where --format names the file's format, an unknown suffix's error says so."""
    try:
        yield
    except UnknownSuffix as error:
        raise UnknownSuffix(f"{error.message} or name the format (--format)", file=error.file) from None


def _run_generate(args: argparse.Namespace) -> int:
    _check_out(args.out, args.format)
    trace = generate(
        args.kind, args.rows, args.seed, pipeline=args.pipeline, max_tokens=args.max_tokens
    )
    path = write_trace(trace, args.out, args.format)
    print(f"wrote {path}: {_brief(trace_stats(trace))}")
    return 0


def _run_fit(args: argparse.Namespace) -> int:
    _check_out(args.out, args.format)
    summary, out = Path(args.summary), Path(args.out)
    # The log is the user's only copy of the run's figures; the trace would replace it.
    if summary.is_file() and out.exists() and summary.samefile(out):
        raise UsageError(f"--out {args.out} is the summary log itself; the trace would replace it")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FitWarning)
        trace = fit_trace(
            args.summary,
            samples_per_step=args.samples_per_step,
            max_tokens=args.max_tokens,
            seed=args.seed,
            column_map=args.column,
        )
    path = write_trace(trace, args.out, args.format)
    print(f"wrote {path}: {_brief(trace_stats(trace))}")
    for caught_warning in caught:
        if issubclass(caught_warning.category, FitWarning):
            # After the write, so that it can say the trace is there: the user decides.
            print(f"rlix-sim: warning: {caught_warning.message}; {path} was written anyway, "
                  "with the fitted means at those steps", file=sys.stderr)
        else:  # not ours to judge: on as if never caught
            warnings.showwarning(caught_warning.message, caught_warning.category,
                                 caught_warning.filename, caught_warning.lineno)
    return 0


def format_stats(name: str, stats: TraceStats) -> str:
    """The human-readable report of `rlix-sim trace inspect`."""
    cap_notes = {
        "capped column": "from the capped column",
        "at pipeline max length": "samples at their pipeline's max length; "
        "the trace has no capped column",
    }
    cap_note = cap_notes.get(
        stats.cap_source, f"samples at the max length {stats.max:,}; the trace has no capped column"
    )
    lines = [
        f"{name}: {_num_rows(stats.rows)}",
        f"  response_tokens  mean {stats.mean:,.1f}  p50 {stats.p50:,.0f}  "
        f"p90 {stats.p90:,.0f}  p99 {stats.p99:,.0f}  max {stats.max:,}",
        f"  longest 10% of samples carry {stats.top10_token_share:.1%} of tokens",
        f"  cap hits {stats.cap_hit_share:.2%} ({cap_note})",
    ]
    if stats.pipelines:
        lines.append(
            f"  {'pipeline':<20}{'rows':>8}{'mean':>10}{'p50':>8}{'p90':>8}"
            f"{'p99':>8}{'max':>8}{'top10%':>8}{'cap':>8}"
        )
        lines += [f"  {pipeline:<20.20}{_row(part)}" for pipeline, part in stats.pipelines.items()]
    return "\n".join(lines)


def _num_rows(count: int) -> str:
    return "1 row" if count == 1 else f"{count:,} rows"


def _row(s: LengthStats) -> str:
    return (
        f"{s.rows:>8,}{s.mean:>10,.1f}{s.p50:>8,.0f}{s.p90:>8,.0f}{s.p99:>8,.0f}"
        f"{s.max:>8,}{s.top10_token_share:>8.1%}{s.cap_hit_share:>8.2%}"
    )


def _brief(stats: TraceStats) -> str:
    return (
        f"{_num_rows(stats.rows)}, mean {stats.mean:,.0f}, max {stats.max:,}, "
        f"top-10% token share {stats.top10_token_share:.1%}, "
        f"cap hits {stats.cap_hit_share:.2%}"
    )
