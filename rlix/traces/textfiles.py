"""Reading CSV and JSON text so that every row keeps the line of the file it came from.

Error messages point at text files by line, as an editor numbers them (a CSV header is line 1,
blank lines count), so the frames returned here carry each row's 1-based line as their index,
named `validate.FILE_LINE`. JSON is parsed here with the standard library, one line at a time
for JSON Lines, because pandas reports bad JSON by byte offset and fails with a bare TypeError
on a line that is not an object. CSV is parsed by pandas; a second pass finds the line each
record starts on, since pandas drops blank lines without saying where.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Final

import pandas as pd
from pandas._libs.parsers import STR_NA_VALUES

from rlix.traces.errors import TraceError
from rlix.traces.schema import INPUT_KINDS, TABLE_COLUMNS
from rlix.traces.validate import FILE_LINE

_SNIPPET_CHARS = 40

#: The columns of a trace or a run table that hold labels (schema: kind "text", dtype
#: "string"), read from CSV as the text written.
TEXT_COLUMNS: Final = frozenset(
    [name for name, kind in INPUT_KINDS.items() if kind == "text"]
    + [name for table in TABLE_COLUMNS.values() for name, dtype in table.items() if dtype == "string"]
)


def read_json_text(path: Path, lines: bool) -> pd.DataFrame:
    """Read JSON Lines (`lines`) or a JSON document: an array of objects or one object.

    A `.json` file that is not one JSON document but several values, one per line, is read as
    JSON Lines. Raises TraceError naming the line (or, in an array, the element) at fault.
    """
    text = _read_text(path)
    if not lines:
        try:
            document = json.loads(text)
        except json.JSONDecodeError as error:
            if error.msg != "Extra data":
                raise _json_error(error, path) from None
            lines = True  # several values: JSON Lines in a .json file
        else:
            return _frame_of_document(document, path)
    return _frame_of_lines(text, path)


def _frame_of_document(document: object, path: Path) -> pd.DataFrame:
    if isinstance(document, dict):
        return pd.DataFrame([document])
    if not isinstance(document, list):
        raise TraceError(
            f"the file holds {_kind(document)}; a trace is an array of objects "
            "or one object per line (JSON Lines)",
            file=path,
        )
    for position, item in enumerate(document):
        if not isinstance(item, dict):
            raise TraceError(
                f"array element {position + 1} is {_described(item, json.dumps(item))}, "
                "not an object {...}",
                file=path,
            )
    return pd.DataFrame(document)


def _frame_of_lines(text: str, path: Path) -> pd.DataFrame:
    records: list[dict[str, object]] = []
    numbers: list[int] = []
    # Split on newlines only: str.splitlines would also split on characters JSON allows in strings.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            raise TraceError(
                f"not valid JSON at character {error.colno}: {error.msg}", file=path, line=number
            ) from None
        if not isinstance(value, dict):
            raise TraceError(
                f"found {_described(value, line)}; each line must be one JSON object {{...}}",
                file=path,
                line=number,
            )
        records.append(value)
        numbers.append(number)
    return pd.DataFrame(records, index=pd.Index(numbers, name=FILE_LINE, dtype="int64"))


def _json_error(error: json.JSONDecodeError, path: Path) -> TraceError:
    return TraceError(
        f"not valid JSON at character {error.colno}: {error.msg}", file=path, line=error.lineno
    )


def read_csv_text(path: Path) -> pd.DataFrame:
    """Read a CSV file with pandas; index each row by the line it starts on.

    Raises TraceError for a record with more fields than the header (pandas would take a first
    column without a header as the index, or fail with a message that counts lines its own way).
    If the line count and pandas disagree about the records (an unusual dialect), rows keep
    pandas' positions and errors name rows, not lines.

    The label columns of the schema (TEXT_COLUMNS: pipeline ids, adapters, clusters, ...) are
    read as text, as written: an id "01", "2.0" or "NA" stays that string (pandas would read
    1, 2.0 and a missing value); only an empty field there is missing. Other columns are
    parsed as pandas does.
    """
    try:
        header = pd.read_csv(path, nrows=0).columns
        frame = pd.read_csv(path, **_csv_options(header))
    except pd.errors.ParserError as error:
        csv_record_lines(path, strict=True)  # names the line when the `csv` module sees the fault
        raise TraceError(f"cannot parse as csv: {_first_line(error)}", file=path) from error
    starts = csv_record_lines(path)
    if starts is not None and len(starts) == len(frame):
        frame.index = pd.Index(starts, name=FILE_LINE, dtype="int64")
    return frame


def _csv_options(header: pd.Index) -> dict[str, Any]:
    """`pd.read_csv` options that keep the TEXT_COLUMNS of `header` as text: read as str, with
    only an empty field taken as missing (not "NA", "null", "nan", ...); the other columns keep
    pandas' own list of missing-value markers."""
    text = [name for name in header if name in TEXT_COLUMNS]
    if not text:
        return {}
    return {
        "dtype": dict.fromkeys(text, str),
        "keep_default_na": False,
        "na_values": {
            name: [""] if name in TEXT_COLUMNS else sorted(STR_NA_VALUES) for name in header
        },
    }


def csv_record_lines(path: Path, strict: bool = False) -> list[int] | None:
    """The 1-based line each data record of a CSV file starts on (blank lines skipped).

    The `csv` module reads record by record and counts lines, a quoted field spanning several
    lines included (about 1 µs a record, as long as pandas takes). Raises TraceError for a
    header naming a column twice and for a record with more fields than the header. A record the `csv` module cannot read (e.g. a quote
    never closed, or, with `strict`, stray text after a closing quote) raises TraceError naming
    its line if `strict`, else returns None: pandas may have read it, and the caller falls back
    to rows.
    """
    starts: list[int] = []
    header: list[str] | None = None
    header_line = end_of_previous = 0
    with path.open(encoding="utf-8-sig", errors="replace", newline="") as handle:
        reader = csv.reader(handle, strict=strict)
        while True:
            try:
                record = next(reader)
            except StopIteration:
                return starts
            except csv.Error as error:
                if not strict:
                    return None
                raise TraceError(
                    f"cannot parse as csv: {error}", file=path, line=end_of_previous + 1
                ) from None
            start, end_of_previous = end_of_previous + 1, reader.line_num
            # pandas skips a line of spaces and tabs, but reads a quoted empty field ("").
            if not record or (len(record) == 1 and record[0] and not record[0].strip(" \t")):
                continue
            if header is None:
                header, header_line = record, start
                _check_header(header, start, path)
            elif len(record) > len(header):
                raise _surplus_fields(len(record), len(header), header_line, start, path)
            else:
                starts.append(start)


def _check_header(header: list[str], line: int, path: Path) -> None:
    """pandas would rename a second 'x' to 'x.1' and read on; a trace must say which it means."""
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise TraceError(
                f"the header names column {name!r} twice; rename one of them", file=path, line=line
            )
        seen.add(name)


def _surplus_fields(
    found: int, expected: int, header_line: int, line: int, path: Path
) -> TraceError:
    return TraceError(
        f"{found} fields, but the header (line {header_line}) names {expected}",
        file=path,
        line=line,
    )


def _read_text(path: Path) -> str:
    try:
        # utf-8-sig: a byte-order mark some Windows tools write is not part of the first key.
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise TraceError(
            f"not UTF-8 text: {error.reason} at byte {error.start}", file=path
        ) from None
    except OSError as error:
        raise TraceError(f"cannot read: {_first_line(error)}", file=path) from error


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _described(value: object, text: str) -> str:
    """E.g. ``an array ([1, 2])``: the kind of a JSON value and the start of its text."""
    if value is None:
        return "null"
    text = " ".join(text.split())
    shown = text if len(text) <= _SNIPPET_CHARS else text[: _SNIPPET_CHARS - 3] + "..."
    return f"{_kind(value)} ({shown})"


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]
