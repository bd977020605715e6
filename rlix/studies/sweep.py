"""`rlix-sim sweep`: run every point of a grid as a Ray task, one row per point, resumable.

A sweep folder holds `sweep.json` (the scenario and the grid: what makes a folder this sweep's),
`results.parquet` (one row per point: the grid values, `point_id`, `status` ok or failed with
its `error`, the Ray node that ran it, and every figure of the point's `summary.json` flattened to dotted columns,
`overall.steps_per_hour`, `overall.jobs.mean_jct_s`, ...), optionally `runs/<point_id>/` (each
point's run folder) and `plots/`. A point's row holds exactly the figures `rlix-sim run` of that
point writes to its summary.json. An axis whose values are not all text, all numbers or all
true/false (`0-1` and `2`, mappings, lists) is a text column: strings as written, the rest as JSON.

Resume: a sweep run again into its folder skips the points whose row says ok (a failed point
is tried again). Rows are written as points finish, so an interrupted sweep keeps what it did.
A folder written by another sweep (another scenario or grid) is refused, and so is one
another sweep is writing at the time (it holds `.sweep.lock` in the folder while it runs).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rlix.runs.errors import RunError
from rlix.scenarios import Scenario
from rlix.studies.grid import Grid, Point, plain_kind, value_text
from rlix.traces.options import UsageError

SWEEP_FILE = "sweep.json"
#: Held by the sweep writing the folder (`_only_sweep`).
LOCK_FILE = ".sweep.lock"
RESULTS_FILE = "results.parquet"
#: The install that brings Ray (pyproject.toml's `exec` extra), named in the error without it.
RAY_INSTALL = "pip install -e '.[exec]'"


def require_ray() -> None:
    """UsageError unless Ray can be imported: a sweep runs its points as Ray tasks. Checked
    before anything is written, so a sweep without Ray leaves no folder behind."""
    if importlib.util.find_spec("ray") is None:
        raise UsageError(f"rlix-sim sweep runs its points on Ray, which is not installed: install "
                         f"the exec extra ({RAY_INSTALL})")


@dataclass
class SweepResult:
    folder: Path
    rows: pd.DataFrame
    num_run: int
    num_skipped: int
    wall_s: float

    @property
    def num_failed(self) -> int:
        return int((self.rows["status"] != "ok").sum()) if len(self.rows) else 0


def flatten(summary: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A summary's figures as dotted columns (per-pipeline figures left out: they differ in
    number from point to point); lists and None are kept as they are."""
    row: dict[str, Any] = {}
    for key, value in summary.items():
        if not prefix and key == "pipelines":
            row["num_pipelines"] = len(value)
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            row.update(flatten(value, name + "."))
        elif isinstance(value, list):
            row[name] = json.dumps(value)
        else:
            row[name] = value
    return row


def run_point(
    scenario: Scenario, run_dir: str | None, tables: frozenset[str] | None = None
) -> tuple[dict[str, Any], str]:
    """One point: the figures of its summary.json (what `rlix-sim run` writes), and the Ray
    node that ran it. With `tables`, the run streams its record to disk as it goes and its
    folder keeps only those tables (memory stays bounded however long the run); without a
    `run_dir` to keep, it streams into a temporary folder that goes when the point is done."""
    import contextlib
    import tempfile

    import ray

    from rlix.sim import simulate

    with contextlib.ExitStack() as scratch:
        out: str | Path | None = run_dir
        if tables is not None and out is None:
            out = Path(scratch.enter_context(tempfile.TemporaryDirectory(prefix="rlix-point-"))) / "run"
        result = simulate(scenario, out=out, overwrite=True, plots=False, alone=True, tables=tables)
    return flatten(result.summary), ray.get_runtime_context().get_node_id()


def run_sweep(
    base: Scenario,
    grid: Grid,
    out: Path,
    *,
    address: str | None = None,
    workers: int = 1,
    keep_runs: bool = False,
    progress: Callable[[int, int], None] | None = None,
    tables: frozenset[str] | None = None,
) -> SweepResult:
    """Run every point not done yet (see the module docstring) and return all rows. `tables`:
    stream each point's record to disk and keep only those tables (`rlix-sim run --tables`)."""
    points = grid.points(base)  # validated up front: a bad axis runs nothing
    require_ray()
    identity = {"scenario": json.loads(base.model_dump_json()), "grid": grid.axes}
    done = _done_rows(out, identity)
    todo = [p for p in points if p.point_id not in done]
    started = time.monotonic()
    rows = {pid: row for pid, row in done.items()}
    if todo:
        with _ray_session(address, workers):
            # Ray is up (or joined) before the folder is claimed: a cluster that cannot be
            # joined, or a Ctrl-C while Ray starts, leaves no folder behind.
            _claim_folder(out, identity)
            with _only_sweep(out):
                rows = dict(_done_rows(out, identity))  # what a sweep before this one ended with
                todo = [p for p in points if p.point_id not in rows]
                _run_on_ray(todo, out, rows, keep_runs, progress, len(points), tables)
    frame = _frame(rows, [p.point_id for p in points], list(grid.axes))
    return SweepResult(out, frame, len(todo), len(points) - len(todo), time.monotonic() - started)


def _done_rows(out: Path, identity: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Rows already done in `out` by this very sweep (none for a new folder); nothing is
    written. A folder of another sweep, or not a sweep's, is refused."""
    marker = out / SWEEP_FILE
    if marker.exists():
        try:
            existing = json.loads(marker.read_text())
        except (OSError, ValueError) as error:
            raise RunError(f"cannot read {marker}: {error}") from None
        if existing != json.loads(json.dumps(identity, default=str)):
            raise UsageError(f"{out} holds another sweep (another scenario or grid): give a new --out")
    elif out.is_dir() and any(out.iterdir()):
        raise UsageError(f"{out} exists and is not a sweep folder: give a new or empty --out")
    results = out / RESULTS_FILE
    if not results.exists():
        return {}
    try:
        frame = pd.read_parquet(results)
    except Exception as error:  # noqa: BLE001 - pyarrow's errors for a cut or foreign file vary
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UsageError(f"{results}: cannot read the rows of the points done ({reason}): remove it to "
                         f"run every point again, or give another --out") from None
    return {str(r["point_id"]): r for r in frame.to_dict("records") if r.get("status") == "ok"}


def _claim_folder(out: Path, identity: dict[str, Any]) -> None:
    """Make the sweep folder and write sweep.json if it is new."""
    out.mkdir(parents=True, exist_ok=True)
    marker = out / SWEEP_FILE
    if not marker.exists():
        # whole or not at all: a sweep.json cut short would make every later run of this
        # sweep refuse its own folder
        _write_whole(marker, lambda part: part.write_text(json.dumps(identity, indent=1, default=str)))


@contextlib.contextmanager
def _only_sweep(out: Path) -> Iterator[None]:
    """Hold the folder's lock for the block: two sweeps writing one folder would each rewrite
    results.parquet with their own rows. The lock goes with the process, however it ends."""
    import fcntl

    with open(out / LOCK_FILE, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"{out}: another sweep is running into this folder: wait for it to end, or give "
                             "another --out") from None
        yield


@contextlib.contextmanager
def _ray_session(address: str | None, workers: int) -> Iterator[None]:
    """Ray started locally, or the cluster at `address` joined, for the block; shut down after
    if this call started it. A cluster is joined as `rlix-exec kill` joins one: checked
    reachable first (a dead address makes Ray retry for minutes), with Ray's token auth on
    when the cluster is this machine's rlix run that has it, or when its head refuses a call
    without a token (session.joined_auth_mode), and off when it takes one. Ray
    takes SIGTERM for itself while it starts (a stack dump, exit 1): after, SIGTERM stops the
    sweep as Ctrl-C does (the rows done are kept, exit 143)."""
    import ray

    from rlix.executor.session import SessionError, address_problem, start
    from rlix.sim.cli import Terminated, terminate_like_interrupt

    problem = None if address is None else address_problem(address)
    if problem is not None:
        raise UsageError(f"--address {address}: {problem}")
    started_here = not ray.is_initialized()
    try:
        try:  # joined with the auth mode the cluster wants (session.joined_auth_mode)
            start(num_gpus=0, num_cpus=workers, address=address, record_address=False)
        except SessionError as error:
            raise UsageError(" ".join(str(error).split())) from None
        with terminate_like_interrupt():  # SIGTERM taken back from Ray, restored after
            terminate = signal.getsignal(signal.SIGTERM)
            assert callable(terminate)  # the handler terminate_like_interrupt installed
            signals: list[int] = []

            def note(signum: int, frame: Any) -> None:
                signals.append(signum)
                terminate(signum, frame)

            signal.signal(signal.SIGTERM, note)
            try:
                yield
            except KeyboardInterrupt as stop:
                # Ray turns whatever a signal raises inside its waits into KeyboardInterrupt
                if signals and not isinstance(stop, Terminated):
                    raise Terminated from None
                raise
    finally:
        if started_here:
            _shut_down_ray()


def _shut_down_ray() -> None:
    """`ray.shutdown`, not cut short: a Ctrl-C or SIGTERM meanwhile (a second Ctrl-C, most
    often) is held and raised after it. Cut short, it left Ray half torn down, and Ray's exit
    hooks then ended the process with status 1 or a segfault instead of the 130 of a Ctrl-C."""
    import ray

    from rlix.sim.cli import Terminated

    held: list[int] = []
    previous: dict[signal.Signals, Any] = {}
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, lambda number, frame: held.append(number))
    except ValueError:  # not the main thread: signals are not ours to take
        pass
    try:
        ray.shutdown()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if held:
        raise Terminated if held[0] == signal.SIGTERM else KeyboardInterrupt


def _run_on_ray(
    todo: list[Point], out: Path, rows: dict[str, dict[str, Any]], keep_runs: bool,
    progress: Callable[[int, int], None] | None, total: int, tables: frozenset[str] | None = None,
) -> None:
    import ray

    task = ray.remote(num_cpus=1)(run_point)
    pending = {}
    for point in todo:
        run_dir = str(out / "runs" / point.point_id) if keep_runs else None
        pending[task.remote(point.scenario, run_dir, tables)] = point
    finished = total - len(todo)
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        point = pending.pop(ready[0])
        row: dict[str, Any] = {"point_id": point.point_id, **point.values}
        try:
            figures, node = ray.get(ready[0])
            row.update(status="ok", error="", ray_node=node, **figures)
        except Exception as error:  # a failed point is recorded and the sweep goes on
            cause = getattr(error, "cause", None) or error
            row.update(status="failed", error=f"{type(cause).__name__}: {cause}"[:500])
        rows[point.point_id] = row
        _write_rows(_frame(rows, list(rows), list(point.values)), out / RESULTS_FILE)
        finished += 1
        if progress is not None:
            progress(finished, total)


def _write_rows(frame: pd.DataFrame, path: Path) -> None:
    """Write the rows whole or not at all, so a sweep cut during the write leaves the rows of
    before, which resume reads."""
    _write_whole(path, lambda part: frame.to_parquet(part, index=False))


def _write_whole(path: Path, write: Callable[[Path], object]) -> None:
    """`write` to a file beside `path`, then renamed over it: `path` is the old file or the new
    one, never a part of either."""
    part = path.with_name(f".{path.name}.part")
    try:
        write(part)
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)


def _frame(rows: dict[str, dict[str, Any]], order: list[str], axes: list[str]) -> pd.DataFrame:
    """The rows in `order`. An axis whose values are not all of one plain kind (text and
    numbers mixed, mappings, lists) is a text column (`value_text`): Parquet holds one type a
    column, and resume matches points by `point_id`, not by these values."""
    records = [rows[pid] for pid in order if pid in rows]
    frame = pd.DataFrame.from_records(records)
    texts = set()
    for axis in axes:
        if axis in frame.columns and plain_kind(list(frame[axis])) is None:
            frame[axis] = [None if v is None else value_text(v) for v in frame[axis]]
            texts.add(axis)
    for column in frame.columns:  # mixed None/number columns stay numbers
        if frame[column].dtype == object and column not in texts:
            converted = pd.to_numeric(frame[column], errors="coerce")
            if converted.notna().sum() == frame[column].notna().sum() and frame[column].notna().any():
                frame[column] = converted
    return frame
