"""Reading and writing trace files: CSV, JSON Lines (or a JSON array) and Parquet.

`read_trace` is the one entry point the simulator uses: it reads a file, applies a column map,
recognises a run's recorded `rollouts` table, validates, and only then returns a DataFrame.
Every failure is a TraceError naming the file. pandas parses CSV, pyarrow Parquet, the standard
library JSON; `rlix.traces.textfiles` keeps each row's line in a text file for error messages.
Writing (`write_frame`, `write_trace`) replaces a file only with a complete new one.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import secrets
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Literal

import pandas as pd

from rlix.traces.columns import apply_column_map, as_column_map
from rlix.traces.errors import TraceError
from rlix.traces.schema import ROLLOUTS_AS_TRACE, TABLE_COLUMNS
from rlix.traces.textfiles import read_csv_text, read_json_text
from rlix.traces.validate import validate_trace

Format = Literal["csv", "jsonl", "json", "parquet"]
FORMATS: tuple[Format, ...] = ("csv", "jsonl", "json", "parquet")
_SUFFIXES: dict[str, Format] = {
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".parquet": "parquet",
    ".pq": "parquet",
}
_SNIFF_BYTES = 64 * 1024


class UnknownSuffix(TraceError):
    """No format named and none told by the file's suffix.

    The message names no option: most commands that read or write a table (``run --trace``,
    ``trace fit``'s summary) have none that names its format, and ``run --format`` is another
    thing. A command that has one adds it (`rlix.traces.cli`).
    """


def format_of(path: str | Path, fmt: str | None = None) -> Format:
    """The format named by `fmt`, or else by the file's suffix; TraceError if neither does."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise TraceError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}", file=path)
        return fmt
    suffix = Path(path).suffix.lower()
    if suffix not in _SUFFIXES:
        raise UnknownSuffix(
            f"cannot tell the format from the suffix {suffix or '(none)'!r}; "
            f"use one of {', '.join(_SUFFIXES)}",
            file=path,
        )
    return _SUFFIXES[suffix]


def read_trace(
    path: str | Path,
    column_map: Mapping[str, str] | Iterable[str] | None = None,
    format: str | None = None,
) -> pd.DataFrame:
    """Read and validate a trace; return a fresh DataFrame with canonical names and dtypes.

    `column_map` maps rlix names to the file's (``{"response_tokens": "num_decode_tokens"}`` or
    ``["response_tokens=num_decode_tokens"]``). A run's `rollouts` table is read as a trace of
    its completed rollouts, with `pipeline_id` and `step_consumed` as `pipeline` and `step`.
    Raises TraceError (one line, naming file, row and column) on any bad input.
    """
    mapping = as_column_map(column_map)
    raw = read_frame(path, format)
    if set(TABLE_COLUMNS["rollouts"]) <= set(raw.columns):
        raw, mapping = _rollouts_as_trace(raw, mapping, path)
    raw = apply_column_map(raw, mapping, file=path)
    return validate_trace(raw, file=path)


def write_trace(frame: pd.DataFrame, path: str | Path, format: str | None = None) -> Path:
    """Write a trace (validated first, so what is written reads back); return the path."""
    validate_trace(frame, file=path)
    return write_frame(frame, path, format)


def read_frame(path: str | Path, format: str | None = None) -> pd.DataFrame:
    """Read any table file as it is, turning every failure into a TraceError naming it.

    Rows of a CSV or JSON Lines file are indexed by their line in the file (index name
    `validate.FILE_LINE`), other rows by their 0-based position, so errors can point at them.
    """
    path = Path(path)
    head = _read_head(path)
    fmt = format_of(path, format)
    if not head:
        raise TraceError("empty file: no header and no rows", file=path)
    _check_content(head, fmt, path)
    try:
        if fmt == "csv":
            return read_csv_text(path)
        if fmt == "parquet":
            frame = pd.read_parquet(path, engine="pyarrow")
            # Errors name Parquet rows by position; pandas restores the index a DataFrame was
            # written with (a filtered frame's labels 10, 20, ...), which would name other rows.
            frame.index = pd.RangeIndex(len(frame))
            return frame
        return read_json_text(path, lines=fmt == "jsonl")
    except TraceError:
        raise
    except pd.errors.EmptyDataError as error:
        raise TraceError("empty table: no data rows", file=path) from error
    except (ValueError, OSError, UnicodeDecodeError, pd.errors.ParserError) as error:
        if fmt == "parquet" and "magic bytes not found in footer" in str(error):
            # it starts as Parquet does (checked before): its end is what is missing
            raise TraceError("not a whole Parquet file: its end is missing (cut short, or still being written)",
                             file=path) from error
        raise TraceError(f"cannot parse as {fmt}: {_first_line(error)}", file=path) from error


def write_frame(frame: pd.DataFrame, path: str | Path, format: str | None = None) -> Path:
    """Write a table as it is in the format of `format` or of the suffix; return the path.

    The table is written to a hidden file beside `path` and renamed onto it only when complete,
    so a failure or an interrupt part way (a full disk, Ctrl-C) leaves the file that was there
    before, or none, never a truncated one; the partial file is removed.
    """
    path = Path(path)
    fmt = format_of(path, format)

    def write(part: Path) -> None:
        if fmt == "csv":
            frame.to_csv(part, index=False)
        elif fmt == "parquet":
            _write_parquet(frame, part)
        else:
            text = frame.to_json(orient="records", lines=True, force_ascii=False)
            if fmt == "json":  # one JSON array rather than one object per line
                text = json.dumps([json.loads(line) for line in text.splitlines()])
            part.write_text(text, encoding="utf-8")

    write_atomically(path, write)
    return path


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Call `write` with a new hidden file in `path`'s folder, then rename that file onto `path`.

    The rename (os.replace) is atomic within a folder, so `path` is at every moment either the
    old file or the new one complete. On any failure, an interrupt too, the hidden file is
    removed, so are the folders made for it, and the error goes on; an OSError becomes a
    TraceError naming `path`. A symlink at `path` stays a link: the file it points to is the one
    replaced. The new file keeps the old one's permission bits (a new one gets the usual 0o666
    less the umask).
    """
    # Replacing a symlink itself would cut the link; the user meant the file it points to.
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    part: Path | None = None
    made = [folder for folder in [target.parent, *target.parent.parents] if not folder.exists()]
    written = False
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        part = _new_file_beside(target)
        if target.exists():
            os.chmod(part, stat.S_IMODE(target.stat().st_mode))
        write(part)
        os.replace(part, target)
        part, written = None, True
    except OSError as error:
        # The hidden file's name means nothing to the user: name the file they asked for.
        text = error.strerror or _first_line(error)
        if part is not None:
            text = text.replace(str(part), str(path))
        raise TraceError(f"cannot write: {text}", file=path) from error
    finally:
        if part is not None:
            # Cleaning up must not hide why the write failed.
            with contextlib.suppress(OSError):
                part.unlink(missing_ok=True)
        if not written:
            # Deepest first; a folder that another writer has meanwhile filled stays.
            for folder in made:
                with contextlib.suppress(OSError):
                    folder.rmdir()


def _new_file_beside(path: Path) -> Path:
    """Create a new empty hidden file in `path`'s folder, named after it; return its path."""
    for _ in range(tempfile.TMP_MAX):
        part = path.with_name(f".{path.name}.{secrets.token_hex(4)}.part")
        try:
            # O_EXCL: never another writer's file. Mode 0o666, not tempfile.mkstemp's 0o600: the
            # umask applies as to any file the user makes, since this one becomes the output.
            os.close(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:  # another writer drew the same name: draw again
            continue
        return part
    raise FileExistsError(f"no free name for a new file beside {path.name}")  # pragma: no cover


#: Rows converted to Arrow at a time when writing a large table to Parquet: a simulated day of
#: a large cluster has ~10^8 rollout rows, and converting them at once would need another copy
#: of the whole table in memory (~9 GB). Smaller tables are written in one go.
PARQUET_SLICE_ROWS = 1 << 22


def _write_parquet(frame: pd.DataFrame, path: Path) -> None:
    if len(frame) <= PARQUET_SLICE_ROWS:
        frame.to_parquet(path, index=False, engine="pyarrow")
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    first = pa.Table.from_pandas(frame.iloc[:PARQUET_SLICE_ROWS], preserve_index=False)
    with pq.ParquetWriter(path, first.schema) as writer:
        writer.write_table(first)
        for lo in range(PARQUET_SLICE_ROWS, len(frame), PARQUET_SLICE_ROWS):
            part = frame.iloc[lo : lo + PARQUET_SLICE_ROWS]
            writer.write_table(pa.Table.from_pandas(part, schema=first.schema, preserve_index=False))


def _read_head(path: Path) -> bytes:
    if not path.exists():
        raise TraceError("no such file", file=path)
    if path.is_dir():
        raise TraceError("is a directory, not a table file", file=path)
    if not path.is_file():
        # A pipe would be drained by the sniff below (and by the CSV line count), so the table
        # would then be read as empty; a FIFO without a writer would block for ever.
        raise TraceError(
            "not a regular file (a pipe or a device): it is read more than once; "
            "save it to a file first",
            file=path,
        )
    try:
        with path.open("rb") as handle:
            return handle.read(_SNIFF_BYTES)
    except OSError as error:
        raise TraceError(f"cannot read: {_first_line(error)}", file=path) from error


def _check_content(head: bytes, fmt: Format, path: Path) -> None:
    """Refuse binary data given as text and text given as Parquet, before pandas guesses."""
    if fmt == "parquet":
        if not head.startswith(b"PAR1"):
            raise TraceError("not a Parquet file (it does not start with PAR1)", file=path)
        return
    try:
        # An incremental decoder tolerates a character cut at the end of the sniffed bytes.
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError as error:
        raise TraceError(f"binary or non-UTF-8 file, not {fmt} text", file=path) from error
    if b"\x00" in head:
        raise TraceError(f"binary file (NUL bytes), not {fmt} text", file=path)


def _rollouts_as_trace(
    raw: pd.DataFrame, mapping: dict[str, str], path: str | Path
) -> tuple[pd.DataFrame, dict[str, str]]:
    """Keep a rollouts table's completed rows; take pipeline and step from its columns.

    Requeued and aborted rows are dropped: a requeued trajectory appears again once completed,
    and replaying both would count it twice. The index keeps file row positions for errors.
    """
    is_completed = raw["status"].astype("string").eq("completed").fillna(False).astype(bool)
    completed = raw[is_completed]
    if completed.empty:
        raise TraceError("rollouts table has no completed rollouts to replay", file=path)
    defaults = {
        target: source
        for target, source in ROLLOUTS_AS_TRACE.items()
        if target not in mapping and target not in raw.columns
    }
    return completed, {**defaults, **mapping}


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]
