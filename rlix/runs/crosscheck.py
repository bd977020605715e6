"""Does a run folder's record hold together? Its tables against its event log (`rlix-sim
check`), and the end of its event log against its summary (`rlix-sim replay`).

The tables and the summary were written by the recorder, the hosts and the metrics; what they
are held to here is `rlix.runs.tally`, counted from `events.jsonl` alone (see there for why
each count bounds its table). A table with rows deleted, emptied, or with rows the log never
caused disagrees:

- allocations: per pipeline, cluster, rank and GPU, at least the holdings of the applied
  Grants and Expands, and no more than those of the ones not reported failed;
- waits: per pipeline and cluster, one row per applied Grant (one fewer per Revoke at most),
  each requested when the log has a request of it, and granted between an applied Grant's
  decision (not before the request) and that holding's end;
- steps: exactly the steps the log's `TrainStepFinished` events finished (and that stand),
  each ending (t_end) when its event says;
- rollouts: completed attempts consumed by every step the log says was trained (by each
  adapter trained, where a crash, kill or cut may have lost the last trajectories handed in);
  a trajectory closed as aborted or left in flight only when the log has its pipeline go away
  or the run cut or end then (`closings_agree`): anywhere else it was lost;
- activity: work only on GPUs the log shows held, and some for every pipeline that trained;
- jobs: one row for every pipeline the log registered (and none for another that arrived),
  its arrival_s when the log first admitted it, its finish_s when the log last removed it.

`log_reaches_summary` is replay's end, and what check and jobs hold the log to before they
use it: a log cut short (lines lost at its end) misses the steps, removals or time the
summary counts.
"""

from __future__ import annotations

import bisect
import json
import math
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from rlix.policy.specs import BASE_ADAPTER
from rlix.runs.errors import RunError
from rlix.runs.tally import EventTally, HoldKey, StepKey

#: The summary's end may come after the log's last event (a live run closes its record a
#: moment after the last pipeline went), never before; this much is rounding.
END_EPS_S = 1e-6
#: Keys named in one message at most.
_SHOWN = 3


class TableMismatch(AssertionError):
    """A table of a run folder disagrees with its event log."""

    def __init__(self, table: str, detail: str) -> None:
        self.table = table
        self.detail = detail
        super().__init__(table, detail)

    def __str__(self) -> str:
        return f"the {self.table} table disagrees with events.jsonl: {self.detail}"


#: Columns of whole numbers among those counted.
_INT_COLUMNS = frozenset({"dp_rank", "gpu", "step", "step_consumed"})


def _counts(frame: pd.DataFrame, columns: list[str]) -> Counter[tuple[Any, ...]]:
    """How often each combination of `columns` occurs in `frame`, keyed by plain str and int
    values. Grouped by pandas first: a rollouts table has millions of rows, few keys."""
    counts: Counter[tuple[Any, ...]] = Counter()
    if frame.empty:
        return counts
    sizes = frame.groupby(columns, observed=True, dropna=False, sort=False).size()
    for key, count in sizes.items():
        counts[tuple(_plain(c, v) for c, v in zip(columns, key, strict=True))] += int(count)
    return counts


def _plain(column: str, value: Any) -> Any:
    if column == "adapter" and pd.isna(value):  # a full-finetune pipeline's adapter may be written empty
        return BASE_ADAPTER
    return int(value) if column in _INT_COLUMNS else str(value)


def _hold(key: HoldKey) -> str:
    pid, cluster, dp_rank, gpu = key
    return f"{pid}/{cluster}{'' if dp_rank < 0 else f' rank {dp_rank}'} on GPU {gpu}"


def allocations_agree(frame: pd.DataFrame, tally: EventTally) -> None:
    rows = _counts(frame, ["pipeline_id", "cluster", "dp_rank", "gpu"])
    for key in sorted(set(rows) | set(tally.applied) | set(tally.possible)):
        held, applied, possible = rows[key], tally.applied[key], tally.possible[key]
        if held < applied:
            raise TableMismatch("allocations", f"{_hold(key)}: {held} holding(s) in the table, but the log "
                                f"has {applied} Grant/Expand decision(s) of it applied")
        if held > possible:
            raise TableMismatch("allocations", f"{_hold(key)}: {held} holding(s) in the table, but the log "
                                f"has only {possible} Grant/Expand decision(s) of it that can have held it")


def waits_agree(frame: pd.DataFrame, tally: EventTally) -> None:
    rows = _counts(frame, ["pipeline_id", "cluster"])
    for key in sorted(set(rows) | set(tally.grants_applied)):
        held, granted = rows[key], tally.grants_applied[key]
        fewest = granted - tally.grants_revoked[key]
        if not fewest <= held <= granted:
            span = f"{granted}" if fewest >= granted else f"{max(fewest, 0)} to {granted}"
            raise TableMismatch("waits", f"{key[0]}/{key[1]}: {held} wait(s) in the table, but the log's "
                                f"applied grants of it make {span}")
    problem = _wait_times_problem(frame, tally)
    if problem is not None:
        raise TableMismatch("waits", problem)


def _wait_times_problem(frame: pd.DataFrame, tally: EventTally) -> str | None:
    """The first wait row whose t_request is no request of its cluster in the log (nor after a
    revoke of it), or whose t_grant lies in no applied grant's span from a decision at or
    after that request to the holding's end; None if there is none."""
    requests = {key: sorted(times) for key, times in tally.requests_s.items()}
    revokes = {key: sorted(times) for key, times in tally.revokes_s.items()}
    spans = {key: sorted(found) for key, found in tally.grant_spans_s.items()}
    columns = ("pipeline_id", "cluster", "t_request", "t_grant")
    for pid, cluster, t_request, t_grant in zip(*(frame[c] for c in columns), strict=True):
        key, t_request, t_grant = (str(pid), str(cluster)), float(t_request), float(t_grant)
        asked = _asked_s(requests.get(key, []), revokes.get(key, []), t_request)
        if asked is None:
            return f"{key[0]}/{key[1]} requested at t_request={t_request} s, but the log has no request of it then"
        if not any(asked - END_EPS_S <= decided <= t_grant + END_EPS_S <= ended + 2 * END_EPS_S
                   for decided, ended in spans.get(key, [])):
            return (f"{key[0]}/{key[1]} granted at t_grant={t_grant} s (requested at {t_request} s), but no grant "
                    f"of it the log applied was decided by then and held until then")
    return None


def _asked_s(requests: list[float], revokes: list[float], t_request: float) -> float | None:
    """When the log asked for what a wait row says was requested at `t_request`: that request
    event's time, or the latest revoke before it (a re-queued request the driver noted when
    it saw the revoke); None if neither. Both lists sorted."""
    at = bisect.bisect_left(requests, t_request - END_EPS_S)
    if at < len(requests) and requests[at] <= t_request + END_EPS_S:
        return t_request
    before = bisect.bisect_right(revokes, t_request + END_EPS_S)
    return revokes[before - 1] if before else None


def steps_agree(frame: pd.DataFrame, tally: EventTally) -> None:
    rows = _counts(frame, ["pipeline_id", "adapter", "step"])
    twice = sorted(key for key, count in rows.items() if count > 1)
    if twice:
        raise TableMismatch("steps", f"step(s) in it more than once: {_steps(twice)}")
    expected = tally.step_keys()
    missing, extra = sorted(expected - set(rows)), sorted(set(rows) - expected)
    if missing:
        raise TableMismatch("steps", f"{len(missing)} step(s) the log finished are not in it: {_steps(missing)}")
    if extra:
        raise TableMismatch("steps", f"{len(extra)} step(s) in it the log never finished: {_steps(extra)}")
    for key, t_end in _step_ends(frame).items():
        finished = tally.step_ends_s[key]
        if not abs(t_end - finished) <= END_EPS_S:
            raise TableMismatch("steps", f"{_steps([key])} ends at t_end={t_end} s, but the log finished it at "
                                f"t={finished} s")


def _step_ends(frame: pd.DataFrame) -> dict[StepKey, float]:
    """Each step row's t_end by (pipeline, adapter, step), keyed as the tally keys them."""
    columns = ["pipeline_id", "adapter", "step"]
    keys = zip(*(frame[column] for column in columns), strict=True)
    return {tuple(_plain(c, v) for c, v in zip(columns, key, strict=True)): float(t_end)
            for key, t_end in zip(keys, frame["t_end"], strict=True)}


def rollouts_agree(consumed: set[StepKey], tally: EventTally) -> None:
    """`consumed`: the (pipeline, adapter, step_consumed) of the table's completed attempts.
    Each step trained has some; of a pipeline that crashed, was killed or was cut, whose last
    trajectories a live run may have lost (`EventTally.trained_whole`), each adapter trained.
    Pipelines driven through the executor's API (`EventTally.untracked`) are asked for none."""
    untracked = tally.untracked
    missing = sorted(key for key in tally.trained_whole - consumed if key[0] not in untracked)
    if missing:
        raise TableMismatch("rollouts", f"no completed trajectory consumed by {len(missing)} step(s) the log "
                            f"trained: {_steps(missing)}")
    fed = {(pid, adapter) for pid, adapter, _step in consumed}
    unfed = sorted({(pid, adapter) for pid, adapter, _step in tally.trained if pid not in untracked} - fed)
    if unfed:
        shown = _some([f"{pid}/{adapter}" for pid, adapter in unfed])
        raise TableMismatch("rollouts", f"no completed trajectory of {shown}, whose train steps the log finished")


#: A live driver closes a removed pipeline's open trajectories a moment before it tells the
#: core (the executor reads its clock for each): a closing this close to a removal is at it.
CLOSE_TOL_S = 1.0
#: The statuses of an attempt that closes a trajectory not completed.
CLOSING = ("aborted", "in_flight")


def closings_agree(part: pd.DataFrame, tally: EventTally, end_s: float) -> None:
    """Invariant 8 against the log: an attempt `aborted` or `in_flight` (rollout rows with
    `pipeline_id, adapter, trajectory_id, status, t_start`; both drivers write such a row at
    the moment they close the trajectory, so it starts and ends then) lies at a removal of its
    pipeline in the log, at a resume's cut, or at the end of the run (`end_s`). The table
    alone cannot tell a trajectory dropped mid-run and marked aborted from one whose pipeline
    went away (`rlix.policy.run_checks` takes an aborted one for the latter); the log can.
    Pipelines driven through the executor's API (`EventTally.untracked`) are asked nothing."""
    closing = part[part["status"].isin(CLOSING)]
    if closing.empty:
        return
    cuts = sorted(tally.cuts_s)
    for pid, adapter, trajectory, status, t in zip(
            closing["pipeline_id"], closing["adapter"], closing["trajectory_id"], closing["status"],
            closing["t_start"], strict=True):
        pid, t = str(pid), float(t)
        if pid in tally.untracked or t >= end_s - CLOSE_TOL_S:
            continue
        if any(abs(t - removed) <= CLOSE_TOL_S for removed in tally.removals_s.get(pid, ())):
            continue
        at = bisect.bisect_left(cuts, t - END_EPS_S)
        if at < len(cuts) and cuts[at] <= t + END_EPS_S:
            continue
        raise TableMismatch("rollouts", f"{pid}/{_plain('adapter', adapter)} trajectory {_plain('trajectory_id', trajectory)} "
                            f"is {status} at t={t} s, when the log has {pid} neither removed nor the run cut "
                            f"or ended: a trajectory lost (invariant 8)")


def completed_steps(part: pd.DataFrame) -> set[StepKey]:
    """The (pipeline, adapter, step_consumed) of the completed attempts among rollout rows."""
    done = part[(part["status"] == "completed").fillna(False)]
    return set(_counts(done, ["pipeline_id", "adapter", "step_consumed"]))


def activity_agrees(frame: pd.DataFrame, tally: EventTally) -> None:
    keys = set(_counts(frame, ["pipeline_id", "cluster", "dp_rank", "gpu"]))
    unheld = sorted(key for key in keys if tally.possible[key] <= 0)
    if unheld:
        raise TableMismatch("activity", f"work on GPUs the log never shows held: {_some([_hold(k) for k in unheld])}")
    trained = {pid for pid, _adapter, _step in tally.trained} - tally.untracked
    idle = sorted(trained - {str(pid) for pid in frame["pipeline_id"].dropna().unique()})
    if idle:
        raise TableMismatch("activity", f"no work of {', '.join(idle)}, whose train steps the log finished")


def jobs_agree(frame: pd.DataFrame, tally: EventTally) -> None:
    """One row per pipeline the log registered, each ending when the log last removes it."""
    ids = frame["pipeline_id"].astype("string")
    if ids.isna().any():
        raise TableMismatch("jobs", f"a row with no pipeline_id (row {int(ids.isna().to_numpy().argmax()) + 1})")
    twice = sorted(set(ids[ids.duplicated()]))
    if twice:
        raise TableMismatch("jobs", f"more than one row for {_some(twice)}")
    missing = sorted(tally.registered - set(ids))
    if missing:
        raise TableMismatch("jobs", f"no row for {', '.join(missing)}, registered in the log")
    # Rows of pipelines never registered are only those of jobs that never arrived: the
    # simulator once listed a cut run's later jobs so, with no figures.
    strangers = sorted(set(ids[frame["arrival_s"].notna().to_numpy()]) - tally.registered)
    if strangers:
        raise TableMismatch("jobs", f"a row for {_some(strangers)}, which the log never registered")
    for pid, finish in zip(ids, frame["finish_s"], strict=True):
        problem = _finish_problem(pid, finish, tally.removed_s.get(pid))
        if problem is not None:
            raise TableMismatch("jobs", problem)
    for pid, arrival in zip(ids, frame["arrival_s"], strict=True):
        admitted = tally.admitted_s.get(pid)
        if admitted is not None and not (not pd.isna(arrival) and abs(float(arrival) - admitted) <= END_EPS_S):
            raise TableMismatch("jobs", f"{pid}'s arrival_s is {'empty' if pd.isna(arrival) else arrival}, but "
                                f"the log admits it at t={admitted} s")
    problem = _derived_problem(frame, ids)
    if problem is not None:
        raise TableMismatch("jobs", problem)


#: A job row's figures made from its others, each as (column, its parts, how): what `rlix-sim
#: jobs` and the summary's means read, so one edited by hand must not pass.
_DERIVED: tuple[tuple[str, tuple[str, str], str], ...] = (
    ("queueing_s", ("start_s", "arrival_s"), "-"),
    ("jct_s", ("finish_s", "arrival_s"), "-"),
    ("slowdown", ("jct_s", "alone_s"), "/"),
)


def _derived_problem(frame: pd.DataFrame, ids: pd.Series) -> str | None:
    """The first job row whose queueing_s, jct_s or slowdown is not what its other figures
    make it (where it is given), or None."""
    for column, (left, right), how in _DERIVED:
        for pid, value, a, b in zip(ids, frame[column], frame[left], frame[right], strict=True):
            if pd.isna(value):
                continue  # a job that never started, finished or ran alone, or one that failed
            if pd.isna(a) or pd.isna(b) or (how == "/" and float(b) <= 0):
                return f"{pid}'s {column} is {value}, but its {left} or {right} is empty"
            made = float(a) - float(b) if how == "-" else float(a) / float(b)
            if not math.isclose(float(value), made, rel_tol=1e-9, abs_tol=END_EPS_S):
                return f"{pid}'s {column} is {value}, but {left} {how} {right} is {made}"
    return None


def _finish_problem(pid: str, finish: Any, removed: float | None) -> str | None:
    """What is wrong with a job row's `finish_s` when the log last removes it at `removed`
    (None: never), or None."""
    if removed is None and pd.isna(finish):
        return None
    if removed is not None and not pd.isna(finish) and abs(float(finish) - removed) <= END_EPS_S:
        return None
    said = "never removes it" if removed is None else f"removes it at t={removed} s"
    return f"{pid}'s finish_s is {'empty' if pd.isna(finish) else finish}, but the log {said}"


def _steps(keys: list[StepKey]) -> str:
    return _some([f"{pid}/{adapter} step {step}" for pid, adapter, step in keys])


def _some(texts: list[str]) -> str:
    """The first few of `texts`, and ", ..." if there are more."""
    return ", ".join(texts[:_SHOWN]) + (", ..." if len(texts) > _SHOWN else "")


def log_reaches_summary(tally: EventTally, summary: Mapping[str, Any], path: Path, line: int) -> None:
    """RunError (naming `path` and its last record's `line`) if the log ends before what
    summary.json says of the run's end: its makespan, whether it finished, and each pipeline's
    steps, shrinks, grants (its waits) and removal. A run cut short on purpose (`finished:
    false`) may end with pipelines running; what it did up to its end both count."""
    makespan = float(summary["makespan_s"])
    last = tally.last_now if tally.last_now is not None else 0.0
    if last > makespan + END_EPS_S:
        raise RunError(f"the log goes on to t={last} s, past summary.json's makespan_s {makespan}", file=path, line=line)
    problem = None
    if summary.get("finished", True) is True and tally.running:
        problem = f"the log ends with {', '.join(sorted(tally.running))} not removed, but summary.json says the run finished"
    pipelines = summary.get("pipelines")
    if problem is None and isinstance(pipelines, dict):  # without per-pipeline figures, nothing to compare
        every = set(pipelines) | set(tally.steps) | set(tally.removed_s) | {pid for pid, _ in tally.shrinks}
        problem = next(filter(None, (_pipeline_end(pid, pipelines.get(pid), tally) for pid in sorted(every))), None)
    if problem is not None:
        raise RunError(f"{problem}; the log was cut short, or is not this run's", file=path, line=line)


def _pipeline_end(pid: str, figures: Any, tally: EventTally) -> str | None:
    """What summary.json's `figures` of `pipeline` say that the log does not, or None. A
    pipeline the summary does not list has done nothing; a figure it lacks is not compared."""
    if not isinstance(figures, dict):
        figures = {"steps": 0, "shrinks": {}, "queue_wait_s": {}, "finish_s": None}
    steps = figures.get("steps")
    if _is_int(steps) and steps != tally.num_steps(pid):
        return f"the log finishes {tally.num_steps(pid)} step(s) of {pid}, summary.json counts {steps}"
    shrinks = figures.get("shrinks")
    if isinstance(shrinks, dict):
        logged = {reason: n for (p, reason), n in tally.shrinks.items() if p == pid and n}
        summed = {reason: n for reason, n in shrinks.items() if n}
        if logged != summed:
            return f"the log shrinks {pid}'s rollout ranks {_by_reason(logged)}, summary.json counts {_by_reason(summed)}"
    waits = figures.get("queue_wait_s")
    if isinstance(waits, dict):
        waited = sum(w["count"] for w in waits.values() if isinstance(w, dict) and _is_int(w.get("count")))
        granted = sum(n for (p, _cluster), n in tally.grants_applied.items() if p == pid)
        fewest = granted - sum(n for (p, _cluster), n in tally.grants_revoked.items() if p == pid)
        if not fewest <= waited <= granted:  # a wait per grant (tally.py), as the waits table has them
            return f"the log applies {granted} grant(s) to {pid}, summary.json counts {waited} wait(s) for them"
    if "finish_s" in figures:
        finish, removed = figures["finish_s"], tally.removed_s.get(pid)
        if (finish is None) != (removed is None) or (
                removed is not None and not (_is_number(finish) and abs(finish - removed) <= END_EPS_S)):
            said = "never" if removed is None else f"at t={removed} s"
            return f"the log removes {pid} {said}, summary.json's finish_s is {json.dumps(finish)}"
    return None


def _by_reason(counts: Mapping[str, Any]) -> str:
    return ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items())) or "never"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
