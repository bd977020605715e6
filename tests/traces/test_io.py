"""Reading and writing traces: every format round-trips, foreign logs replay through a map."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest

from rlix.traces import generate, read_trace, write_trace
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
