"""`timeline.json`: a run in the Chrome trace event format (Perfetto, chrome://tracing).

Process "GPUs" has one track per GPU: each holding is a slice named by its pipeline (so one
pipeline keeps one colour), with the cluster, rank and priority in its args; the stages and
weight loads run on that holding (`activity`) are slices nested inside it, named by stage.
Process "Steps" has tracks per pipeline and adapter with one slice per train step, its stage
times in its args; steps that overlap (staleness k >= 1) go on extra lanes of that adapter,
since slices on one track must nest.

Times are microseconds ("ts", "dur"), as the format requires; the run's seconds times 1e6.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rlix.runs.frames import RunTables

GPU_PID, STEPS_PID = 1, 2
US_PER_S = 1e6


#: Rows of a table formatted at a time: a simulated day of a large cluster has millions of
#: holdings and activity spans, and its timeline is written as it is formatted, a slice at a
#: time, never held whole.
SLICE_ROWS = 1 << 18


def trace_events(tables: RunTables) -> list[dict[str, Any]]:
    """Every trace event of the run as dicts, metadata first (what `timeline.json` holds)."""
    return [json.loads(line) for chunk in _event_chunks(tables) for line in chunk]


def write_timeline(tables: RunTables, path: str | Path) -> Path:
    path = Path(path)
    with path.open("w", encoding="utf-8") as handle:
        # One event per line: a long run's file stays greppable and diffable.
        handle.write('{"displayTimeUnit": "ms", "traceEvents": [\n')
        first = True
        for chunk in _event_chunks(tables):
            if chunk:
                handle.write(("" if first else ",\n") + ",\n".join(chunk))
                first = False
        handle.write("\n]}\n")
    return path


def _event_chunks(tables: RunTables) -> Iterator[list[str]]:
    """The timeline's event lines, in order, a slice of a table at a time."""
    meta: list[dict[str, Any]] = [
        _meta(GPU_PID, None, "process_name", "GPUs"),
        _meta(STEPS_PID, None, "process_name", "Steps"),
    ]
    for gpu in range(tables.num_gpus):
        meta.append(_meta(GPU_PID, gpu, "thread_name", f"GPU {gpu}"))
        meta.append(_meta(GPU_PID, gpu, "thread_sort_index", gpu, key="sort_index"))
    yield [_dumps(e) for e in meta]
    for table, lines in ((tables.allocations, _holdings), (tables.activity, _activity)):
        for lo in range(0, len(table), SLICE_ROWS):
            yield lines(table.iloc[lo : lo + SLICE_ROWS])
    yield [_dumps(e) for e in _steps(tables.steps)]


def _dumps(event: dict[str, Any]) -> str:
    return json.dumps(event, separators=(",", ":"))


def _meta(pid: int, tid: int | None, name: str, value: Any, key: str = "name") -> dict[str, Any]:
    event: dict[str, Any] = {"ph": "M", "pid": pid, "name": name, "args": {key: value}}
    if tid is not None:
        event["tid"] = tid
    return event


def _times(frame: pd.DataFrame, start: str = "t_start", end: str = "t_end") -> tuple[list[float], list[float]]:
    ts = np.round(frame[start].to_numpy(float) * US_PER_S, 3)
    dur = np.round(frame[end].to_numpy(float) * US_PER_S, 3) - ts
    return ts.tolist(), dur.tolist()


def _quoted(column: pd.Series) -> list[str]:
    """JSON string literals of a text column, escaped once per distinct value."""
    values = column.astype(object).where(column.notna(), "").tolist()
    literal = {v: json.dumps(str(v)) for v in set(values)}
    return [literal[v] for v in values]


# Hundreds of thousands of slices: formatted directly, every text field pre-escaped, about five
# times faster than building and dumping a dict per slice.
def _holdings(alloc: pd.DataFrame) -> list[str]:
    ts, dur = _times(alloc)
    return [
        f'{{"ph":"X","pid":{GPU_PID},"tid":{gpu},"ts":{t},"dur":{d},"name":{pid},"cat":"holding",'
        f'"args":{{"cluster":{cluster},"dp_rank":{rank},"priority":{priority}}}}}'
        for pid, cluster, priority, rank, gpu, t, d in zip(
            _quoted(alloc["pipeline_id"]), _quoted(alloc["cluster"]), alloc["priority"].tolist(),
            alloc["dp_rank"].tolist(), alloc["gpu"].tolist(), ts, dur, strict=True)
    ]


def _activity(act: pd.DataFrame) -> list[str]:
    ts, dur = _times(act)
    return [
        f'{{"ph":"X","pid":{GPU_PID},"tid":{gpu},"ts":{t},"dur":{d},"name":{stage},"cat":{kind},'
        f'"args":{{"pipeline_id":{pid},"cluster":{cluster},"dp_rank":{rank}}}}}'
        for pid, cluster, rank, gpu, kind, stage, t, d in zip(
            _quoted(act["pipeline_id"]), _quoted(act["cluster"]), act["dp_rank"].tolist(),
            act["gpu"].tolist(), _quoted(act["kind"]), _quoted(act["stage"]), ts, dur, strict=True)
    ]


def _steps(steps: pd.DataFrame) -> list[dict[str, Any]]:
    if steps.empty:
        return []
    stage_columns = [c for c in steps.columns if c.endswith("_s")]
    steps = steps.sort_values(["pipeline_id", "adapter", "t_start"], kind="stable")
    ts, dur = _times(steps)
    tids: dict[tuple[str, str, int], int] = {}
    lane_ends: dict[tuple[str, str], list[float]] = {}
    events: list[dict[str, Any]] = []
    records = steps.to_dict("records")
    for row, t, d in zip(records, ts, dur, strict=True):
        track = (str(row["pipeline_id"]), str(row["adapter"]))
        lane = _lane(lane_ends.setdefault(track, []), float(t), float(t + d))
        key = (*track, lane)
        if key not in tids:
            tids[key] = len(tids)
            suffix = f" ({lane + 1})" if lane else ""
            events.append(_meta(STEPS_PID, tids[key], "thread_name", f"{track[0]}/{track[1]}{suffix}"))
        args = {c: _plain(row[c]) for c in stage_columns}
        args.update({k: _plain(v) for k, v in row.items() if k not in args and k not in ("t_start", "t_end")})
        events.append({"ph": "X", "pid": STEPS_PID, "tid": tids[key], "ts": float(t), "dur": float(d),
                       "name": f"step {row['step']}", "cat": "step", "args": args})
    return events


def _lane(lane_ends: list[float], start: float, end: float) -> int:
    """The first lane whose last slice ended by `start` (a new lane if none); it runs to `end`.

    Steps come sorted by start, so a track needs at most k + 1 lanes under staleness k.
    """
    for lane, lane_end in enumerate(lane_ends):
        if lane_end <= start:
            lane_ends[lane] = end
            return lane
    lane_ends.append(end)
    return len(lane_ends) - 1


def _plain(value: Any) -> Any:
    if value is None or value is pd.NA:
        return None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value
