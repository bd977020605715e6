"""Reading `events.jsonl`: its header, its records with line numbers, and the facts summaries need.

The file is read lazily, line by line, so a long run's log is never held in memory at once.
Every problem (missing file, bad JSON, a line that is not a record) is a `RunError` naming the
file and line.

A resumed live run continues its log after a segment line, `{"segment": {"at_s": ...,
"resumed": {...}}}`: the run was cut there (every actor gone) and went on with a fresh core
(same header), so a replay starts a new core at each segment line.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from rlix.policy.specs import PipelineSpec
from rlix.runs import codec
from rlix.runs.errors import RunError

EVENTS_FILE = "events.jsonl"
#: The key of a segment line (see the module docstring).
SEGMENT = "segment"
_BLOCK_BYTES = 1 << 16


def events_path(run_dir: str | Path) -> Path:
    """`events.jsonl` of the run in `run_dir`; RunError if the folder or the file is missing."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunError("a file, not a run folder" if run_dir.exists() else "no such run folder", file=run_dir)
    path = run_dir / EVENTS_FILE
    if not path.is_file():
        # A compare folder holds one run folder per policy: name them rather than leave the
        # user to guess that the runs are one level down.
        try:
            inner = sorted(child.name for child in run_dir.iterdir() if (child / EVENTS_FILE).is_file())
        except OSError:  # unreadable: say what the folder is not, as for any other
            inner = []
        if inner:
            shown = ", ".join(inner[:4]) + (", ..." if len(inner) > 4 else "")
            raise RunError(f"no events.jsonl: not a run folder, but it holds run folders: {shown}", file=run_dir)
        raise RunError("no events.jsonl: not a run folder, or the run was not written", file=run_dir)
    return path


def read_header(path: Path) -> dict[str, Any]:
    """The header record (line 1) of an events file."""
    for number, record in _records(path):
        if "header" not in record:
            raise RunError('the first line is not the header ({"header": ...})', file=path, line=number)
        return record
    raise RunError("empty events file: no header", file=path)


def iter_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, {"event": ..., "decisions": [...]}) for every line after the header, and
    (line number, {"segment": {...}}) for each segment line."""
    records = _records(path)
    first = next(records, None)
    if first is None or "header" not in first[1]:
        raise RunError('the first line is not the header ({"header": ...})', file=path, line=1)
    for number, record in records:
        if isinstance(record.get(SEGMENT), dict):
            yield number, record
            continue
        if not isinstance(record.get("event"), dict) or not isinstance(record.get("decisions"), list):
            raise RunError('not an event record ({"event": {...}, "decisions": [...]})', file=path, line=number)
        yield number, record


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every non-blank line."""
    try:
        handle = path.open(encoding="utf-8")
    except OSError as error:
        raise RunError(f"cannot read: {error.strerror or error}", file=path) from error
    with handle:
        number = 0
        try:
            for number, line in enumerate(handle, start=1):  # noqa: B007 (read in the except)
                if line.strip():
                    yield number, line
        except UnicodeDecodeError as error:
            raise RunError("not UTF-8 text", file=path, line=number + 1) from error


def newline_before(handle: IO[bytes], end: int) -> int:
    """The offset of the last newline before offset `end` of a binary file, or -1 if none:
    read back a block at a time, as a log (or a live run's journal) may be gigabytes."""
    while end > 0:
        start = max(0, end - _BLOCK_BYTES)
        handle.seek(start)
        found = handle.read(end - start).rfind(b"\n")
        if found >= 0:
            return start + found
        end = start
    return -1


def _parse(line: str, path: Path, number: int) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise RunError(f"not JSON: {error.msg} (column {error.colno})", file=path, line=number) from error
    if not isinstance(record, dict):
        raise RunError("not a JSON object", file=path, line=number)
    return record


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in numbered_lines(path):
        yield number, _parse(line, path, number)


def iter_events(path: Path, types: frozenset[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, event) of every event of one of `types` (by its "type"), in log order.
    Lines that do not name one of them are not parsed: most of a long log is progress reports."""
    quoted = tuple(f'"{name}"' for name in types)
    for number, line in numbered_lines(path):
        if not any(word in line for word in quoted):
            continue
        event = _parse(line, path, number).get("event")
        if isinstance(event, dict) and event.get("type") in types:
            yield number, event


class EventFacts:
    """What the tables do not say but the event log does: each pipeline's spec (as placed, for
    a home given as a size), when it was
    admitted and removed (and whether it failed: crashed or was killed), and how many of its
    rollout ranks were shrunk, by reason (preempt, rebalance, release)."""

    def __init__(self) -> None:
        self.specs: dict[str, PipelineSpec] = {}
        #: Each pipeline's specs as placed, with when: a resumed run places a home given as a
        #: size again, maybe elsewhere, and its earlier holdings keep the earlier home.
        self.placements: dict[str, list[tuple[float, PipelineSpec]]] = {}
        self.shrinks: dict[str, Counter[str]] = {}
        self.admitted_s: dict[str, float] = {}
        self.removed_s: dict[str, float] = {}
        self.failed: set[str] = set()

    def add_line(self, line: str) -> None:
        if _worth_parsing(line):
            self.add_record(json.loads(line))

    def add_record(self, record: dict[str, Any]) -> None:
        event = record.get("event", {})
        if event.get("type") == "PipelineRegistered":
            spec = codec.spec_from_dict(event["spec"])
            self.specs[spec.pipeline_id] = spec
        elif event.get("type") == "PipelineAdmitted":  # the first admission: a resumed run admits again
            self.admitted_s.setdefault(event["pipeline_id"], float(event["now"]))
        elif event.get("type") == "PipelineRemoved":
            self.removed_s[event["pipeline_id"]] = float(event["now"])
            if event.get("failed"):
                self.failed.add(event["pipeline_id"])
        for decision in record.get("decisions", ()):
            if decision.get("type") == "Shrink":
                self.shrinks.setdefault(decision["pipeline_id"], Counter())[decision["reason"]] += 1
            elif decision.get("type") == "Place":
                pid = decision["pipeline_id"]
                self.specs[pid] = codec.placed_spec(self.specs[pid], decision)
                self.placements.setdefault(pid, []).append((float(event.get("now", 0.0)), self.specs[pid]))

    def spec_at(self, pipeline_id: str, t_s: float) -> PipelineSpec | None:
        """The pipeline's spec as placed at `t_s`: the latest placement made by then (the
        first, for a time before any), or its spec when it was never placed."""
        placements = self.placements.get(pipeline_id)
        if not placements:
            return self.specs.get(pipeline_id)
        spec = placements[0][1]
        for placed_s, placed in placements:
            if placed_s > t_s + 1e-9:
                break
            spec = placed
        return spec


def _worth_parsing(line: str) -> bool:
    # Only a few lines register, admit or remove a pipeline or shrink a rank: skip the JSON
    # parse of the rest.
    return any(word in line for word in _WORTH_PARSING)


_WORTH_PARSING = ('"Shrink"', '"Place"', '"PipelineRegistered"', '"PipelineAdmitted"', '"PipelineRemoved"')


def facts_from_lines(lines: Iterable[str]) -> EventFacts:
    """Facts from the JSON lines of a recorder (header included; it is skipped)."""
    facts = EventFacts()
    for line in lines:
        facts.add_line(line)
    return facts


def facts_from_file(path: Path) -> EventFacts:
    lines = numbered_lines(path)
    next(lines, None)  # the header (read_header checks it)
    read_header(path)
    facts = EventFacts()
    for number, line in lines:
        if not _worth_parsing(line):
            continue
        try:
            facts.add_record(_parse(line, path, number))
        except (KeyError, TypeError, ValueError) as error:
            raise RunError(f"bad PipelineRegistered or Shrink record: {error!r}", file=path, line=number) from error
    return facts
