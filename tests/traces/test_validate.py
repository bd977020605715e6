"""Every kind of bad input is one clear TraceError naming the file, and row and column where
they apply; nothing is returned half-loaded."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from rlix.traces import TraceError, read_trace, validate_trace

ROW = "(1-based)"


def read_error(path: Path, column_map: list[str] | None = None) -> TraceError:
    with pytest.raises(TraceError) as caught:
        read_trace(path, column_map)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(str(path))
    return caught.value


@pytest.mark.parametrize(
    ("text", "row", "column", "fragment"),  # row: the data row, so the file's line is row + 1
    [
        ("response_tokens\n5\n2.5\n", 2, "response_tokens", "2.5 is not an integer"),
        ("response_tokens\n5\n7\n0\n", 3, "response_tokens", "0 is not positive"),
        ("response_tokens\n-4\n", 1, "response_tokens", "-4 is not positive"),
        ("response_tokens\n5\n10000001\n", 2, "response_tokens", "absurd (more than 10,000,000)"),
        ("response_tokens\n5\nNaN\n", 2, "response_tokens", "missing value"),
        ("response_tokens,step\n5,0\n,1\n", 2, "response_tokens", "missing value"),
        ("response_tokens\n5\nlots\n", 2, "response_tokens", "'lots' is not a number"),
        ("response_tokens\n5\ninf\n", 2, "response_tokens", "not a finite number"),
        ("response_tokens,prompt_tokens\n5,0\n", 1, "prompt_tokens", "0 is not positive"),
        ("response_tokens,step\n5,-1\n", 1, "step", "-1 is negative"),
        ("response_tokens,num_turns\n5,0\n", 1, "num_turns", "0 is not positive"),
        ("response_tokens,tool_time_s\n5,-0.5\n", 1, "tool_time_s", "-0.5 is negative"),
        ("response_tokens,pipeline\n5,a\n6,\n", 2, "pipeline", "missing value"),
        ("response_tokens,capped\n5,maybe\n", 1, "capped", "'maybe' is not true or false"),
    ],
)
def test_bad_value_names_line_and_column(
    tmp_path: Path, text: str, row: int, column: str, fragment: str
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    error = read_error(path)
    assert (error.line, error.row, error.column) == (row + 1, None, column)
    assert f"{path}, line {row + 1}, column {column!r}: " in str(error)
    assert fragment in str(error)
    # The same table as Parquet has no lines: it is pointed at by row.
    parquet = tmp_path / "bad.parquet"
    pd.read_csv(path, dtype=str, keep_default_na=False).to_parquet(parquet)
    error = read_error(parquet)
    assert (error.line, error.row) == (None, row)
    assert f"{parquet}, row {row} {ROW}, column {column!r}: " in str(error)


def test_first_bad_row_wins_across_columns(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("prompt_tokens,response_tokens\n1,1\n1,1\n1,-2\n0,1\n")
    error = read_error(path)
    assert (error.line, error.column) == (4, "response_tokens")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("response_tokens\n1\n\n2\n-3\n", 5),  # a blank line
        ("response_tokens\n1\n \t \n\n2\n-3\n", 6),  # spaces and tabs, then blank
        ("\n\nresponse_tokens\n1\n-3\n", 5),  # blank lines before the header
        ("response_tokens\r\n1\r\n\r\n-3\r\n", 4),  # Windows line ends
        ('response_tokens,note\n1,"two\nlines"\n\n-3,x\n', 5),  # a quoted field on two lines
    ],
)
def test_csv_errors_name_the_file_line(tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / "bad.csv"
    path.write_bytes(text.encode())
    error = read_error(path)
    assert error.line == line
    assert str(error).startswith(f"{path}, line {line}, column 'response_tokens': -3 is not")


def test_csv_quoted_empty_field_is_a_row_not_a_blank_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text('response_tokens\n1\n""\n2\n')
    error = read_error(path)
    assert (error.line, error.column) == (3, "response_tokens")
    assert "missing value" in str(error)


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("response_tokens\n1,2\n3,4\n", 2, "2 fields, but the header (line 1) names 1"),
        ("response_tokens\n1\n\n2,3,4\n", 4, "3 fields, but the header (line 1) names 1"),
        ('response_tokens\n"1\n",2\n', 2, "2 fields, but the header (line 1) names 1"),
    ],
)
def test_csv_record_with_more_fields_than_the_header(
    tmp_path: Path, text: str, line: int, fragment: str
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    error = read_error(path)
    assert error.line == line and fragment in str(error)


def test_csv_rows_when_lines_cannot_be_counted(tmp_path: Path) -> None:
    # A field past the csv module's size limit: pandas reads it, the line count gives up, and
    # the error falls back to naming the row, saying so.
    path = tmp_path / "bad.csv"
    path.write_text("response_tokens,note\n1,short\n-3," + "x" * 200_000 + "\n")
    error = read_error(path)
    assert (error.line, error.row) == (None, 2)
    assert f"row 2 {ROW}" in str(error)


def test_values_are_shown_as_written(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"response_tokens": 3, "capped": 5}\n')
    assert str(read_error(path)).endswith("column 'capped': 5 is not true or false")


def test_bad_value_in_jsonl_and_parquet(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"response_tokens": 3}\n{"response_tokens": true}\n')
    error = read_error(path)
    assert (error.line, error.row) == (2, None)
    assert f"{path}, line 2, column 'response_tokens': True is not a number" == str(error)
    path = tmp_path / "bad.parquet"
    pd.DataFrame({"response_tokens": [3.0, 4.0, 4.5]}).to_parquet(path)
    assert read_error(path).row == 3


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("empty.csv", b"", "empty file"),
        ("header.csv", b"response_tokens\n", "empty table"),
        ("empty.jsonl", b"\n", "empty table"),
        ("binary.csv", bytes(range(256)) * 8, "binary or non-UTF-8 file"),
        ("nul.jsonl", b'{"response_tokens": 1}\x00\x00', "binary file"),
        ("text.parquet", b"response_tokens\n1\n", "not a Parquet file"),
        ("cut.parquet", b"PAR1 truncated", "not a whole Parquet file: its end is missing"),
        ("ragged.csv", b"response_tokens\n1\n2,3,4\n", "line 3: 3 fields, but the header"),
        (
            "quote.csv",
            b'response_tokens\n1\n"2\n3\n',
            "line 3: cannot parse as csv: unexpected end",
        ),
        ("broken.jsonl", b'{"response_tokens": 1\n', "line 1: not valid JSON at character 22"),
        ("trace.txt", b"response_tokens\n1\n", "cannot tell the format"),
        ("other.csv", b"tokens\n5\n", "missing required column 'response_tokens'"),
        ("twice.csv", b"\nresponse_tokens,response_tokens\n5,6\n", "line 2: the header names"),
    ],
)
def test_bad_file(tmp_path: Path, name: str, content: bytes, fragment: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    assert fragment in str(read_error(path))


@pytest.mark.parametrize(
    ("line", "found"),
    [
        ("[1, 2]", "found an array ([1, 2])"),
        ("5", "found a number (5)"),
        ("null", "found null;"),
        ('"text"', 'found a string ("text")'),
        ("true", "found a boolean (true)"),
    ],
)
def test_jsonl_line_that_is_not_an_object(tmp_path: Path, line: str, found: str) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(f'{{"response_tokens": 1}}\n\n{line}\n{{"response_tokens": 2}}\n')
    error = read_error(path)
    assert error.line == 3
    assert str(error).startswith(f"{path}, line 3: {found}")
    assert "each line must be one JSON object" in str(error)


def test_malformed_jsonl_names_the_line_not_a_byte(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text('{"response_tokens": 1}\n{"response_tokens": 2\n{"response_tokens": 3}\n')
    error = read_error(path)
    assert str(error) == f"{path}, line 2: not valid JSON at character 22: Expecting ',' delimiter"


def test_jsonl_rows_are_named_by_file_line_past_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(
        '{"response_tokens": 1}\n\n   \n{"response_tokens": 5}\n{"response_tokens": -2}\n'
    )
    error = read_error(path)
    assert (error.line, error.column) == (5, "response_tokens")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('[{"response_tokens": 1}, [2]]', "array element 2 is an array ([2]), not an object"),
        ('"trace"', "the file holds a string; a trace is an array of objects"),
        ('[\n{"response_tokens": 1},\n{"response_tokens" 2}\n]', "line 3: not valid JSON"),
    ],
)
def test_bad_json_document(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "trace.json"
    path.write_text(text)
    assert fragment in str(read_error(path))


@pytest.mark.parametrize(
    "text",
    [
        '{\n  "response_tokens": 7\n}\n',  # one pretty-printed object
        '{"response_tokens": 7}\n',  # JSON Lines in a .json file
        '\ufeff[{"response_tokens": 7}]',  # a byte-order mark before an array
    ],
)
def test_json_shapes_that_read(tmp_path: Path, text: str) -> None:
    path = tmp_path / "trace.json"
    path.write_text(text, encoding="utf-8")
    assert read_trace(path)["response_tokens"].tolist() == [7]


def test_missing_file_and_directory(tmp_path: Path) -> None:
    assert "no such file" in str(read_error(tmp_path / "absent.csv"))
    assert "is a directory" in str(read_error(tmp_path))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "locked.csv"
    path.write_text("response_tokens\n1\n")
    path.chmod(0)
    assert "cannot read" in str(read_error(path))


def test_mapped_column_that_does_not_exist(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    path.write_text("GeneratedTokens\n5\n")
    error = read_error(path, ["response_tokens=Generated"])
    assert "has no column 'Generated'" in str(error)


def test_validate_leaves_input_untouched() -> None:
    raw = pd.DataFrame({"response_tokens": ["5", "6"]})
    trace = validate_trace(raw)
    assert trace["response_tokens"].tolist() == [5, 6]
    assert raw["response_tokens"].tolist() == ["5", "6"]


@pytest.mark.parametrize(
    "values",
    [pd.to_timedelta([1.5, 2.0], unit="s"), pd.to_datetime(["2024-01-01", "2024-01-02"])],
)
def test_a_date_or_duration_column_is_not_read_as_nanoseconds(values: pd.Index) -> None:
    """A Parquet duration of 1.5 s was read as 1.5e9 seconds of tool time, silently."""
    frame = pd.DataFrame({"response_tokens": [10, 20], "tool_time_s": values})
    with pytest.raises(TraceError) as raised:
        validate_trace(frame, file="t.parquet")
    assert str(raised.value).startswith("t.parquet, row 1 (1-based), column 'tool_time_s': ")
    assert str(raised.value).endswith(" is a date or a duration, not a number")
