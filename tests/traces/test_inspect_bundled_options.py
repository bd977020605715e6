"""`rlix-sim trace inspect NAME` of a bundled trace refuses --column and --format, which read a
file: one line, exit 2, rather than ignoring them."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("options", "words"), [
    (["--column", "response_tokens=x"], "--column is for a trace file"),
    (["--format", "csv"], "--format is for a trace file"),
    (["--column", "response_tokens=x", "--format", "csv"], "--column and --format are for a trace file"),
])
def test_file_options_on_a_bundled_trace_are_refused(run_cli, options: list[str], words: str) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_cli("trace", "inspect", "math_small", *options)
    assert (code, out) == (2, "")
    assert err == f"rlix-sim: error: {words}; math_small is a bundled trace, already in rlix's columns\n"


def test_a_bundled_trace_alone_is_inspected(run_cli) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run_cli("trace", "inspect", "math_small")
    assert code == 0 and out.startswith("math_small: 4,096 rows")
