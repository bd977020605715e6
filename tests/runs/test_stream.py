"""rlix.runs.stream, totals and tablechoice: the table names, a table written a piece at a
time, and the summary's totals from a spill equal to those from the tables in memory."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rlix.runs import RunError, summary
from rlix.runs.frames import tables_from_recorder
from rlix.runs.recorder import ACTIVITY_COLUMNS, ALLOCATION_COLUMNS
from rlix.runs.stream import open_sink
from rlix.runs.tablechoice import ALL_TABLES, TABLE_CHOICES, check_tables, tables_option
from rlix.runs.totals import BUSY, HELD, LOADING, CoverSpill, totals_from_tables
from rlix.traces.tables import TableStream, read_table, write_table
from tests.runs.fake_run import two_pipeline_run


def test_table_names_are_checked_in_one_line_naming_the_known_ones() -> None:
    assert check_tables(["steps", " jobs "]) == {"steps", "jobs"}
    assert check_tables(TABLE_CHOICES) == ALL_TABLES
    with pytest.raises(RunError) as caught:
        check_tables(["steps", "rollout", "gantt"])
    message = str(caught.value)
    assert "\n" not in message
    assert "rollout, gantt" in message
    assert "known: allocations, steps, rollouts, activity, waits, jobs" in message
    with pytest.raises(RunError, match="no table named"):
        check_tables(["", " "])
    with pytest.raises(argparse.ArgumentTypeError, match="unknown table"):
        tables_option("steps,bogus")


@pytest.mark.parametrize("format", ["parquet", "csv"])
def test_a_table_written_in_pieces_reads_back_as_written_whole(tmp_path: Path, format: str) -> None:
    recorder = two_pipeline_run()
    frame = pd.DataFrame(recorder.activity, columns=list(ACTIVITY_COLUMNS))
    whole = write_table(frame, tmp_path / "whole", "activity", format)  # type: ignore[arg-type]
    stream = TableStream(tmp_path, "activity", format)  # type: ignore[arg-type]
    for lo in range(0, len(frame), 3):
        stream.write(frame.iloc[lo : lo + 3].reset_index(drop=True))
    path = stream.close(frame.iloc[:0])
    assert stream.num_rows == len(frame) > 6
    pd.testing.assert_frame_equal(read_table(path), read_table(whole))
    if format == "parquet":
        import pyarrow.parquet as pq

        assert pq.ParquetFile(path).num_row_groups == -(-len(frame) // 3)


def test_an_empty_stream_leaves_an_empty_table(tmp_path: Path) -> None:
    stream = TableStream(tmp_path, "allocations")
    path = stream.close(pd.DataFrame(columns=list(ALLOCATION_COLUMNS)))
    assert len(read_table(path)) == 0
    assert list(read_table(path).columns) == list(ALLOCATION_COLUMNS)


@pytest.mark.parametrize("with_waits", [False, True])
def test_totals_from_a_spill_equal_totals_from_the_tables(tmp_path: Path, with_waits: bool) -> None:
    """The spill path (what a streamed run computes its summary from) against the in-memory
    tables, on a run with holdings, busy and loading spans, and shrinks of every reason (and
    with jobs that wait, for the figures while they do)."""
    recorder = two_pipeline_run()
    tables = tables_from_recorder(recorder)
    if with_waits:
        tables = dataclasses.replace(tables, more_pipelines=("w0", "w1"), admitted_s={"w0": 5.0, "w1": 20.0},
                                     removed_s={"w0": 30.0})
    spill = CoverSpill(tmp_path / "cover")
    spill.BUFFER_ROWS = 4  # several writes
    for row in recorder.allocations:
        spill.add(row[0], row[4], row[5], row[6], HELD)
    for row in recorder.activity:
        spill.add(row[0], row[3], row[6], row[7], LOADING if row[4] == "loading" else BUSY)
    want = totals_from_tables(tables)
    got = spill.totals(tables, want.trajectories)
    assert np.array_equal(got.cover_s, want.cover_s)
    assert got.first_grant == want.first_grant
    assert got.window == want.window
    assert (got.waiting is None) == (not with_waits) and (want.waiting is None) == (not with_waits)
    if got.waiting is not None and want.waiting is not None:
        assert np.array_equal(got.waiting.starts, want.waiting.starts)
        assert np.array_equal(got.waiting.ends, want.waiting.ends)
    assert summary(tables, totals=got) == summary(tables)


def test_a_streamed_run_folder_honours_the_umask(tmp_path: Path) -> None:
    """The folder a streamed run is written into (and renamed to the run folder) is made as
    mkdir makes one, not 0700."""
    previous = os.umask(0o022)
    try:
        sink = open_sink(tmp_path / "run")
    finally:
        os.umask(previous)
    try:
        assert sink.folder.parent == tmp_path and sink.folder.stat().st_mode & 0o777 == 0o755
    finally:
        sink.discard()
    assert not list(tmp_path.iterdir())


def test_unknown_tables_leave_no_staging_folder(tmp_path: Path) -> None:
    """A sink refused for its table names is refused before its hidden folder is made, which
    nobody would have removed."""
    with pytest.raises(RunError, match="unknown table"):
        open_sink(tmp_path / "run", tables=["steps", "stepz"])
    assert not list(tmp_path.iterdir())
