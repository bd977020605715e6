"""Reading and writing traces: every format round-trips, foreign logs replay through a map."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest

from rlix.traces import TraceError, generate, read_trace, write_trace
from rlix.traces.io import format_of

from .conftest import AZURE_MAP


def full_trace() -> pd.DataFrame:
    """A generated trace with every optional column, including an adapter with gaps."""
    trace = generate("agentic", 300, seed=3, pipeline="agent-a")
    adapters = pd.array(["lora-1", None, "lora-2"] * 100, dtype="string")
    trace.insert(1, "adapter", adapters)
    trace["note"] = "extra columns are kept"
    return trace


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".json", ".parquet"])
def test_round_trip_every_format(tmp_path: Path, suffix: str) -> None:
    trace = full_trace()
    path = write_trace(trace, tmp_path / f"trace{suffix}")
    back = read_trace(path)
    pdt.assert_frame_equal(back.drop(columns="note"), trace.drop(columns="note"))
    assert back["note"].tolist() == trace["note"].tolist()
    assert back["response_tokens"].dtype == np.dtype("int64")


def test_explicit_format_overrides_suffix(tmp_path: Path) -> None:
    path = tmp_path / "trace.log"
    path.write_text("response_tokens\n5\n7\n")
    assert read_trace(path, format="csv")["response_tokens"].tolist() == [5, 7]


def test_format_from_suffix() -> None:
    assert format_of("a/b.CSV") == "csv"
    assert format_of("x.ndjson") == "jsonl"
    assert format_of("x.pq") == "parquet"


def test_read_returns_canonical_frame(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("extra,step,response_tokens\nz,1,5.0\nz,2,6\n")
    trace = read_trace(path)
    assert list(trace.columns) == ["step", "response_tokens", "extra"]
    assert trace["response_tokens"].tolist() == [5, 6]
    assert trace.index.tolist() == [0, 1]


def test_azure_log_replays_through_column_map(azure_path: Path) -> None:
    trace = read_trace(azure_path, AZURE_MAP)
    raw = pd.read_csv(azure_path)
    assert len(trace) == 19_366
    assert trace["response_tokens"].tolist() == raw["num_decode_tokens"].tolist()
    assert trace["prompt_tokens"].tolist() == raw["num_prefill_tokens"].tolist()
    assert "arrived_at" in trace.columns  # unmapped columns are kept
    # The figures /work/shared/traces/README.md gives for this log.
    assert trace["response_tokens"].median() == 129
    assert trace["response_tokens"].max() == 1000


def test_column_map_as_mapping(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"GeneratedTokens": 12, "task": "chat"}\n')
    trace = read_trace(path, {"response_tokens": "GeneratedTokens", "pipeline": "task"})
    assert trace.to_dict("records") == [{"pipeline": "chat", "response_tokens": 12}]


@pytest.mark.parametrize("slice_rows", [1, 2, 3])
def test_large_parquet_is_written_a_slice_at_a_time_and_reads_back_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slice_rows: int
) -> None:
    """A table longer than PARQUET_SLICE_ROWS is converted to Arrow a slice at a time (memory of
    10^8-row tables); it reads back equal to the one written whole, categoricals, text with
    gaps, 32-bit integers and floats included."""
    import rlix.traces.io as io

    frame = pd.DataFrame({
        "pipeline_id": pd.Categorical(["a", "b", "a", "a", "b", "b", "a"]),
        "status": pd.Categorical.from_codes([0, 1, 1, 0, 2, 1, 1], ["completed", "requeued", "aborted"]),
        "note": ["x", None, "y", None, None, "z", "w"],
        "tokens": np.array([5, 7, 9, 11, 13, 15, 17], dtype=np.int32),
        "t": [0.5, 1.5, 2.25, np.nan, 4.0, 5.0, 6.125],
    })
    whole = io.read_frame(io.write_frame(frame, tmp_path / "whole.parquet"))
    monkeypatch.setattr(io, "PARQUET_SLICE_ROWS", slice_rows)
    sliced = io.read_frame(io.write_frame(frame, tmp_path / "sliced.parquet"))
    pd.testing.assert_frame_equal(sliced, whole)
    pd.testing.assert_frame_equal(sliced, frame)


def _fail_mid_write(monkeypatch: pytest.MonkeyPatch, suffix: str, error: BaseException) -> None:
    """Make the next write of a `suffix` table put some bytes in its file and then fail."""
    import rlix.traces.io as io

    def partial(path: str | Path) -> None:
        Path(path).write_bytes(b"response_tokens\n1")  # a half-written table

    def to_csv(self: pd.DataFrame, path: Path, *args: object, **kwargs: object) -> None:
        partial(path)
        raise error

    def write_parquet(frame: pd.DataFrame, path: Path) -> None:
        partial(path)
        raise error

    if suffix == ".csv":
        monkeypatch.setattr(pd.DataFrame, "to_csv", to_csv)
    else:
        monkeypatch.setattr(io, "_write_parquet", write_parquet)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize("error", [KeyboardInterrupt(), OSError(28, "No space left on device")])
def test_failed_write_leaves_the_old_file_and_no_partial_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str, error: BaseException
) -> None:
    """A write that fails part way (Ctrl-C, a full disk) leaves the file that was there whole:
    the new table goes to a hidden file beside it, removed on failure, renamed only when done."""
    path = write_trace(generate("math", 50, seed=1), tmp_path / f"trace{suffix}")
    before = path.read_bytes()
    _fail_mid_write(monkeypatch, suffix, error)
    expected = TraceError if isinstance(error, OSError) else KeyboardInterrupt
    with pytest.raises(expected) as caught:
        write_trace(generate("math", 80, seed=2), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    if isinstance(caught.value, TraceError):
        # It names the file asked for, never the hidden one.
        assert str(caught.value) == f"{path}: cannot write: No space left on device"


def test_failed_first_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fail_mid_write(monkeypatch, ".csv", KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        write_trace(generate("math", 50, seed=1), tmp_path / "new.csv")
    assert list(tmp_path.iterdir()) == []


def test_rewrite_keeps_permissions_and_symlinks(tmp_path: Path) -> None:
    """The file is replaced by rename, yet it keeps its mode, and a link to it stays a link."""
    target = write_trace(generate("math", 50, seed=1), tmp_path / "real.csv")
    target.chmod(0o640)
    link = tmp_path / "link.csv"
    link.symlink_to(target.name)
    write_trace(generate("math", 80, seed=2), link)
    assert link.is_symlink() and link.resolve() == target
    assert len(read_trace(target)) == 80
    assert target.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.csv", "real.csv"]


def test_a_pipe_or_device_is_refused_not_read_as_empty(tmp_path: Path) -> None:
    """A pipe was drained by the format sniff and then read as an empty table; a FIFO with no
    writer hung. A subprocess, so that the hang fails the test instead of stopping it."""
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    done = subprocess.run(
        [sys.executable, "-m", "rlix.sim.cli", "trace", "inspect", str(fifo)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().endswith(
        "trace.csv: not a regular file (a pipe or a device): it is read more than once; "
        "save it to a file first"
    )
    with pytest.raises(TraceError, match="/dev/null: not a regular file"):
        read_trace("/dev/null", format="csv")


def test_a_parquet_row_is_named_by_its_place_whatever_index_it_was_written_with(
    tmp_path: Path,
) -> None:
    """pandas stores a frame's index in Parquet and restores it: a filtered frame written as it
    is had its second row named 'row 21' (label 20, plus one) in a file of three rows."""
    path = tmp_path / "t.parquet"
    pd.DataFrame({"response_tokens": [1, -2, 3]}, index=[10, 20, 30]).to_parquet(path)
    with pytest.raises(TraceError) as raised:
        read_trace(path)
    assert str(raised.value).startswith(f"{path}, row 2 (1-based), column 'response_tokens': -2 ")
