"""The journal of a live run: the driver's copy of the record, on disk as it grows.

The driver pulls the orchestrator's record every half second (`rlix.executor.live`); each piece
is also appended here, one JSON line, flushed, so a driver killed with SIGKILL (or a machine
that stops) leaves the record up to its last piece. `rlix-exec resume` rebuilds the Recorder
from it. The first line says what wrote it: the resolved scenario and the version of rlix (a
resume refuses another's journal); a last line cut short by the kill is ignored when read and
cut off before the journal is written again (so a resume's lines start on a line of their own).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from rlix.policy.config import PolicyConfig
from rlix.policy.specs import Topology
from rlix.runs.eventlog import newline_before
from rlix.runs.recorder import ROLLOUT_COLUMNS, Recorder

JOURNAL_FILE = "journal.jsonl"


class JournalError(ValueError):
    """A journal that cannot be read back (one line, naming the file)."""


def _encode(piece: dict[str, Any]) -> dict[str, Any]:
    encoded = dict(piece)
    encoded["open"] = [[list(key), [held[0], list(held[1]), held[2]]] for key, held in piece["open"].items()]
    return encoded


def _decode(piece: dict[str, Any]) -> dict[str, Any]:
    decoded = dict(piece)
    decoded["open"] = {tuple(key): (held[0], tuple(held[1]), held[2]) for key, held in piece["open"]}
    for name in ("allocations", "activity", "waits"):
        decoded[name] = [tuple(row) for row in piece[name]]
    # (pipeline_id, cluster, dp_rank, gpus, kind, stage, t_start): JSON made the GPUs a list
    decoded["open_activity"] = [(*span[:3], tuple(span[3]), *span[4:]) for span in piece.get("open_activity", [])]
    return decoded


class JournalWriter:
    """Appends to the journal at `path` (its head line first if it is new). `owner` (the
    driver's pid and its local Ray session's raylet pids) is written each time a driver opens
    it: a resume waits for that run's processes to be gone before it touches its files."""

    def __init__(self, path: Path, scenario_yaml: str, version: str, owner: dict[str, Any] | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        _cut_unfinished_line(path)
        self._handle: IO[str] | None = path.open("a", encoding="utf-8")
        if path.stat().st_size == 0:
            self._line({"journal": {"scenario_yaml": scenario_yaml, "rlix_version": version}})
        if owner is not None:
            self._line({"owner": owner})

    def write(self, piece: dict[str, Any], progress: dict[str, Any]) -> None:
        self._line({"record": _encode(piece), "progress": progress})

    def resumed(self, cut: dict[str, Any], states: dict[str, dict[str, Any]], faults: list[dict[str, Any]]) -> None:
        """A resume's cut (`apply_cut`'s arguments), so the record rebuilt later makes it too,
        with what the run knew before it of pipelines not started again (their final states)
        and of the faults it survived: a later resume has them from here, as no progress line
        after this one names them."""
        self._line({"resume": cut, "states": states, "faults": faults})

    def _line(self, data: dict[str, Any]) -> None:
        if self._handle is not None:
            self._handle.write(json.dumps(data, separators=(",", ":")) + "\n")
            self._handle.flush()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _cut_unfinished_line(path: Path) -> None:
    """Drop a last line cut short by a kill (what follows it would be glued onto it)."""
    try:
        with path.open("rb+") as handle:
            size = handle.seek(0, 2)
            if size == 0:
                return
            handle.seek(size - 1)
            if handle.read(1) == b"\n":
                return
            handle.truncate(newline_before(handle, size) + 1)
    except FileNotFoundError:
        return


@dataclass
class Journal:
    """A journal read back: what wrote it, the record it holds, the last progress it saw."""

    scenario_yaml: str
    rlix_version: str
    recorder: Recorder
    progress: dict[str, Any] = field(default_factory=dict)
    #: The last driver that wrote it: {"driver_pid", "raylet_pids"}.
    owner: dict[str, Any] = field(default_factory=dict)
    #: As of the last resume: the final states of the pipelines it did not start again, and the
    #: faults the run had survived (`progress` says what came after).
    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    faults: list[dict[str, Any]] = field(default_factory=list)


def read_journal(path: Path, topology: Topology, policy: str, config: PolicyConfig) -> Journal:
    """The journal at `path`, its record rebuilt on a Recorder with this header."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise JournalError(f"{path}: cannot be read ({error.strerror or error})") from None
    try:
        head = json.loads(lines[0])["journal"]
    except (IndexError, ValueError, KeyError, TypeError):
        raise JournalError(f"{path}: not an rlix journal (no journal line first)") from None
    recorder = Recorder(topology, policy, config)
    progress: dict[str, Any] = {}
    owner: dict[str, Any] = {}
    states: dict[str, dict[str, Any]] = {}
    faults: list[dict[str, Any]] = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            data = json.loads(line)
        except ValueError:
            if number == len(lines):
                break  # the last line, cut short by a kill
            raise JournalError(f"{path}, line {number}: not JSON") from None
        if "resume" in data:
            apply_cut(recorder, **data["resume"])
            states, faults = dict(data.get("states", {})), list(data.get("faults", []))
            progress = {}  # the cut took in what the progress before it said
            continue
        if "owner" in data:
            owner = data["owner"]
            continue
        recorder.extend(_decode(data["record"]))
        progress = data["progress"]
    return Journal(str(head["scenario_yaml"]), str(head["rlix_version"]), recorder, progress, owner, states, faults)


def apply_cut(recorder: Recorder, at_s: float, restarts: dict[str, dict[str, int]],
              resumed: dict[str, Any]) -> None:
    """Cut a record for a resume: what was held ends at `at_s`; the steps a restarted pipeline
    redoes (`restarts`: pipeline -> adapter -> first step) leave the steps table, as their
    training was thrown away (their rollouts and GPU time stay: they happened); a segment line
    says what each pipeline started again from."""
    recorder.finish(at_s)
    recorder.steps = [row for row in recorder.steps
                      if row["step"] < restarts.get(row["pipeline_id"], {}).get(row["adapter"], 1 << 62)]
    abort_requeued(recorder, set(restarts), at_s)
    recorder.resume(resumed)


def abort_requeued(recorder: Recorder, pipeline_ids: set[str], at_s: float) -> None:
    """Trajectories of the cut pipelines left re-queued (in flight when the driver died, or
    when a stop signal ended the run) end as aborted at the cut, as a pipeline's do when it is
    removed (RolloutBook.abort)."""
    columns = recorder.rollouts
    last: dict[tuple[str, str, int], int] = {}
    for index, (pid, adapter, trajectory) in enumerate(zip(columns["pipeline_id"], columns["adapter"],
                                                          columns["trajectory_id"], strict=True)):
        if pid in pipeline_ids:
            last[(pid, adapter, trajectory)] = index
    open_rows = [i for i in last.values() if columns["status"][i] == "requeued"]
    if open_rows:
        aborted = {name: [columns[name][i] for i in open_rows] for name in ROLLOUT_COLUMNS}
        count = len(open_rows)
        aborted.update(status=["aborted"] * count, t_start=[at_s] * count, t_end=[at_s] * count,
                       recomputed_tokens=[0] * count)
        recorder.add_rollouts(aborted)
