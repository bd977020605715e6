"""What `summary.json` needs from the long tables, reduced per pipeline: `RunTotals`.

The summary's GPU time shares come from `allocations` and `activity`, its trajectory figures
from `rollouts`. A run that keeps those tables in memory reduces them here at the end
(`totals_from_tables`); a run that streams its record (`rlix.runs.stream`) keeps no such table
in memory and gets the same totals another way: holdings and spans spilled to disk in a compact
form and reduced one pipeline at a time (`CoverSpill`), attempts counted as they happen. Both
paths reduce each pipeline's intervals with the one function here (`pipeline_cover`), in the
same row order, so the two give bit-identical figures.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from rlix.runs.intervals import merge, sweep

if TYPE_CHECKING:
    from rlix.runs.frames import RunTables

HELD, BUSY, LOADING = 0, 1, 2
#: Columns of `RunTotals.cover_s`: GPU-seconds held, busy and loading (busy and loading only
#: where the pipeline held the GPU; loading not busy), then busy and loading inside the
#: all-active window, then inside the times some job waits to start (`waiting_set`).
COVER_COLUMNS = ("held", "busy", "loading", "busy_in_window", "loading_in_window",
                 "busy_while_waiting", "loading_while_waiting")
TRAJECTORY_COLUMNS = ("trajectories", "generated_tokens", "preemptions", "recomputed_tokens")
#: One spilled interval: pipeline code, GPU, start, end, layer (21 bytes on disk; the code
#: only in the buffer, each pipeline's records going to its own file).
SPILL_DTYPE = np.dtype([("owner", "<i4"), ("gpu", "<i4"), ("t0", "<f8"), ("t1", "<f8"), ("layer", "i1")])


@dataclass(frozen=True)
class RunTotals:
    """Per pipeline (in `pipeline_ids` order): GPU time (`cover_s`, COVER_COLUMNS), the first
    grant (the earliest holding's start, for the job figures) and trajectory counts
    (TRAJECTORY_COLUMNS, indexed by pipeline id)."""

    cover_s: np.ndarray
    window: tuple[float, float] | None
    first_grant: dict[str, float]
    trajectories: pd.DataFrame
    waiting: Waiting | None = None


@dataclass(frozen=True)
class Waiting:
    """The times at least one job waits to start: the union of each job's [arrival, first
    grant) (to its removal or the end of the run if it never starts). The union's cumulative
    length is piecewise linear in time, so it is kept as its breakpoints (`points`: each
    interval's start and end, in order) and its values there (`cumulative`), and `measure(t0,
    t1)`, how much of it lies in [t0, t1] elementwise, is two interpolations."""

    points: np.ndarray
    cumulative: np.ndarray

    @property
    def starts(self) -> np.ndarray:
        return self.points[0::2]

    @property
    def ends(self) -> np.ndarray:
        return self.points[1::2]

    @property
    def total_s(self) -> float:
        return float(self.cumulative[-1])

    def measure(self, t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
        inside: np.ndarray = np.interp(t1, self.points, self.cumulative) - np.interp(t0, self.points, self.cumulative)
        return inside


def waiting_set(tables: RunTables, first_grant: Mapping[str, float]) -> Waiting | None:
    """The times some job waits (`Waiting`), or None if no job ever waited."""
    end_s = tables.makespan_s
    starts = [max(tables.admitted_s.get(pid, 0.0), 0.0) for pid in tables.pipeline_ids]
    ends = [min(first_grant.get(pid, end_s), tables.removed_s.get(pid, end_s), end_s) for pid in tables.pipeline_ids]
    _keys, t0, t1 = merge(np.zeros(len(starts), np.int64), np.array(starts, float), np.array(ends, float))
    if not len(t0):
        return None
    total = np.cumsum(t1 - t0)
    return Waiting(np.column_stack([t0, t1]).ravel(), np.column_stack([total - (t1 - t0), total]).ravel())


def all_active_window(tables: RunTables, pipeline_ids: list[str]) -> tuple[float, float] | None:
    """The span in which every pipeline is admitted and none removed yet, or None."""
    if not pipeline_ids or tables.num_gpus <= 0:
        return None
    spans = [active_span(tables, pid) for pid in pipeline_ids]
    t_start, t_end = max(s for s, _ in spans), min(e for _, e in spans)
    return (t_start, t_end) if t_end > t_start else None


def active_span(tables: RunTables, pipeline_id: str) -> tuple[float, float]:
    """From the pipeline's admission (or the start of the run) to its removal (or the end)."""
    t_start = tables.admitted_s.get(pipeline_id, 0.0)
    t_end = tables.removed_s.get(pipeline_id, tables.makespan_s)
    return t_start, max(t_start, min(t_end, tables.makespan_s))


def pipeline_cover(gpu: np.ndarray, t0: np.ndarray, t1: np.ndarray, layer: np.ndarray,
                   makespan_s: float, window: tuple[float, float] | None,
                   waiting: Waiting | None = None) -> np.ndarray:
    """COVER_COLUMNS of one pipeline from its holdings (layer HELD) and spans (BUSY, LOADING)
    on each GPU; a GPU's overlapping spans count once, everything clipped to the run."""
    t0, t1 = np.clip(t0, 0.0, makespan_s), np.clip(t1, 0.0, makespan_s)
    segments = sweep(gpu.astype(np.int64), t0, t1, layer.astype(np.int64), 3)
    held = segments.covered(HELD)
    busy = held & segments.covered(BUSY)
    loading = held & segments.covered(LOADING) & ~busy
    duration = segments.duration
    out = np.zeros(len(COVER_COLUMNS))
    out[0], out[1], out[2] = _total(duration[held]), _total(duration[busy]), _total(duration[loading])
    if window is not None:
        clipped = np.clip(segments.t1, *window) - np.clip(segments.t0, *window)
        out[3], out[4] = _total(clipped[busy]), _total(clipped[loading])
    if waiting is not None:
        inside = waiting.measure(segments.t0, segments.t1)
        out[5], out[6] = _total(inside[busy]), _total(inside[loading])
    return out


def _total(values: np.ndarray) -> float:
    # In order, one by one (as a weighted bincount adds), not numpy's pairwise sum: the
    # figures stay bit-identical to those of the whole-pool sweep this replaced.
    return float(np.bincount(np.zeros(len(values), np.intp), weights=values, minlength=1)[0])


def totals_from_tables(tables: RunTables) -> RunTotals:
    """The totals of a run whose tables are in memory."""
    pipeline_ids = tables.pipeline_ids
    window = all_active_window(tables, pipeline_ids)
    alloc, act = tables.allocations, tables.activity
    owners = np.concatenate([_codes(alloc, pipeline_ids), _codes(act, pipeline_ids)])
    gpu = np.concatenate([alloc["gpu"].to_numpy(np.int64), act["gpu"].to_numpy(np.int64)])
    t0 = np.concatenate([alloc["t_start"].to_numpy(float), act["t_start"].to_numpy(float)])
    t1 = np.concatenate([alloc["t_end"].to_numpy(float), act["t_end"].to_numpy(float)])
    act_layer = np.where(act["kind"].to_numpy(object) == "loading", LOADING, BUSY)
    layer = np.concatenate([np.full(len(alloc), HELD), act_layer]).astype(np.int8)
    first_grant = _first_grants(pipeline_ids, owners[layer == HELD], t0[layer == HELD])
    waiting = waiting_set(tables, first_grant)
    cover_s = _reduce(pipeline_ids, owners, gpu, t0, t1, layer, tables.makespan_s, window, waiting)
    return RunTotals(cover_s, window, first_grant, trajectory_counts(tables.rollouts), waiting)


def _first_grants(pipeline_ids: list[str], owners: np.ndarray, t0: np.ndarray) -> dict[str, float]:
    """Each pipeline's earliest holding (`owners`, `t0`: the holdings' codes and starts)."""
    first = np.full(len(pipeline_ids), np.inf)
    np.minimum.at(first, owners, t0)
    return {pid: float(first[i]) for i, pid in enumerate(pipeline_ids) if first[i] < np.inf}


def _codes(frame: pd.DataFrame, pipeline_ids: list[str]) -> np.ndarray:
    codes: np.ndarray = pd.Categorical(frame["pipeline_id"], categories=pipeline_ids).codes
    return codes.astype(np.int64)


def _reduce(pipeline_ids: list[str], owners: np.ndarray, gpu: np.ndarray, t0: np.ndarray,
            t1: np.ndarray, layer: np.ndarray, makespan_s: float,
            window: tuple[float, float] | None, waiting: Waiting | None) -> np.ndarray:
    """`cover_s`: each pipeline's rows (in their order) through `pipeline_cover`."""
    order = np.argsort(owners, kind="stable")
    bounds = np.searchsorted(owners[order], np.arange(len(pipeline_ids) + 1))
    cover_s = np.zeros((len(pipeline_ids), len(COVER_COLUMNS)))
    for index in range(len(pipeline_ids)):
        rows = order[bounds[index] : bounds[index + 1]]
        if len(rows):
            cover_s[index] = pipeline_cover(gpu[rows], t0[rows], t1[rows], layer[rows], makespan_s, window, waiting)
    return cover_s


class CoverSpill:
    """Holdings and spans of a streamed run, appended to a file per pipeline as compact records
    (`SPILL_DTYPE`) and reduced one pipeline at a time at the end (`totals`): their memory is a
    buffer and one pipeline's intervals, not the run's length."""

    #: Records buffered before they are written (~1.3 MB on disk).
    BUFFER_ROWS = 1 << 16

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._code: dict[str, int] = {}
        self._rows: list[tuple[int, int, float, float, int]] = []
        self._first_grant: dict[str, float] = {}

    @property
    def pipeline_ids(self) -> list[str]:
        return list(self._code)

    def _path(self, code: int) -> Path:
        return self.folder / f"{code}.bin"

    def add(self, pipeline_id: str, gpu: int, t0: float, t1: float, layer: int) -> None:
        code = self._code.get(pipeline_id)
        if code is None:
            code = self._code[pipeline_id] = len(self._code)
        self._rows.append((code, gpu, t0, t1, layer))
        if layer == HELD and t0 < self._first_grant.get(pipeline_id, math.inf):
            self._first_grant[pipeline_id] = t0
        if len(self._rows) >= self.BUFFER_ROWS:
            self.flush()

    def flush(self) -> None:
        """Append the buffered records to their pipelines' files, in the order they came."""
        if not self._rows:
            return
        records = np.array(self._rows, dtype=SPILL_DTYPE)
        self._rows = []
        owners = records["owner"]
        for code in np.unique(owners).tolist():
            with self._path(code).open("ab") as handle:
                handle.write(records[owners == code].tobytes())

    def totals(self, tables: RunTables, trajectories: pd.DataFrame) -> RunTotals:
        """The totals of the run (`tables`: its steps, waits and event facts; the long tables
        may be empty), with the trajectory counts kept as it ran."""
        self.flush()
        pipeline_ids = tables.pipeline_ids
        window = all_active_window(tables, pipeline_ids)
        first_grant = {pid: float(t0) for pid, t0 in self._first_grant.items()}
        waiting = waiting_set(tables, first_grant)
        cover_s = np.zeros((len(pipeline_ids), len(COVER_COLUMNS)))
        for pipeline_id, code in self._code.items():
            path = self._path(code)
            records = np.fromfile(path, dtype=SPILL_DTYPE) if path.exists() else np.zeros(0, SPILL_DTYPE)
            if len(records):
                cover_s[pipeline_ids.index(pipeline_id)] = pipeline_cover(
                    records["gpu"], records["t0"], records["t1"], records["layer"], tables.makespan_s, window, waiting)
        return RunTotals(cover_s, window, first_grant, trajectories, waiting)

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


#: Rows per slice in `trajectory_counts` (its temporaries are a few bytes a row of one slice).
_SLICE_ROWS = 1 << 22


def trajectory_counts(rollouts: pd.DataFrame) -> pd.DataFrame:
    """Per pipeline (index): completed trajectories, their response tokens, re-queued attempts
    and recomputed tokens. Weighted bincounts over pipeline codes, a slice of rows at a time:
    the table can hold 10^8 rows, so no per-row Python objects and per-row temporaries of one
    slice only."""
    codes, pipelines = pd.factorize(rollouts["pipeline_id"], use_na_sentinel=False)
    num_pipelines = len(pipelines)
    status = rollouts["status"]
    response = rollouts["response_tokens"].to_numpy()
    recomputed = (
        rollouts["recomputed_tokens"].to_numpy() if "recomputed_tokens" in rollouts else None
    )
    # Float sums of integers: exact below 2**53.
    sums = np.zeros((4, num_pipelines), dtype=np.float64)
    for lo in range(0, len(codes), _SLICE_ROWS):
        part = slice(lo, lo + _SLICE_ROWS)
        part_codes = codes[part]
        part_status = status.iloc[part]
        completed = (part_status == "completed").fillna(False).to_numpy(bool)
        requeued = (part_status == "requeued").fillna(False).to_numpy(bool)
        done_codes = part_codes[completed]
        sums[0] += np.bincount(done_codes, minlength=num_pipelines)
        sums[1] += np.bincount(done_codes, response[part][completed], minlength=num_pipelines)
        sums[2] += np.bincount(part_codes[requeued], minlength=num_pipelines)
        if recomputed is not None:
            sums[3] += np.bincount(part_codes, recomputed[part], minlength=num_pipelines)
    totals = np.rint(sums).astype(np.int64)
    return counts_frame({str(pid): totals[:, i].tolist() for i, pid in enumerate(pipelines)})


def counts_frame(counts: Mapping[str, list[int]]) -> pd.DataFrame:
    """Trajectory counts (TRAJECTORY_COLUMNS per pipeline) as the frame `summary` reads."""
    rows = {pid: dict(zip(TRAJECTORY_COLUMNS, values, strict=True)) for pid, values in counts.items()}
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=list(TRAJECTORY_COLUMNS))
    return frame.fillna(0).astype(np.int64)
