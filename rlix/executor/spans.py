"""Spans of GPU activity (busy stages, rollout calls; weight loads, offloads, syncs) from a
pipeline actor to the run's record, told while they go on as well as when they end.

A pipeline actor notes each span as it begins (`ActorSpans.span`) and sends, every flush, the
spans that ended and those still open. The orchestrator (`SpanBook`) opens the still-open ones
in the recorder and closes them with their real end when it comes, so a run stopped in the
middle of a stage or a load shows those GPUs at work up to the stop, as the simulator's cut
does (`Recorder.open_activity`). A span's block that raises leaves no span, and a removed
pipeline's open spans end at its removal: its actors are dead, and their GPUs go to others.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlix.runs.recorder import Recorder

#: (span id, pipeline_id, cluster, dp_rank, gpus, kind, stage, t_start[, t_end])
Span = tuple[Any, ...]


class ActorSpans:
    """The pipeline actor's side: its open spans, and the ended ones not sent yet."""

    def __init__(self, pipeline_id: str, clock: Callable[[], float]) -> None:
        self.pipeline_id = pipeline_id
        self.clock = clock
        self._ids = itertools.count()
        self._open: dict[int, Span] = {}
        self._ended: list[Span] = []
        self._sent_open: list[int] = []

    @contextmanager
    def span(self, cluster: str, dp_rank: int, gpus: Iterable[int], kind: str,
             stage: str) -> Iterator[Callable[[], None]]:
        """The block's span, from now to its end; calling what it yields drops the span (the
        work did not happen: a worker found dead), as does an exception out of the block."""
        span_id = next(self._ids)
        self._open[span_id] = (span_id, self.pipeline_id, cluster, dp_rank, tuple(gpus), kind, stage, self.clock())
        kept = [True]
        try:
            yield lambda: kept.__setitem__(0, False)
        except BaseException:
            self._open.pop(span_id, None)
            raise
        span = self._open.pop(span_id)
        if kept[0]:
            self._ended.append((*span, self.clock()))

    def take(self) -> tuple[list[Span], list[Span] | None]:
        """The spans ended since the last take, and the open ones (None: the same as sent last)."""
        ended, self._ended = self._ended, []
        ids = list(self._open)
        if ids == self._sent_open:
            return ended, None
        self._sent_open = ids
        return ended, list(self._open.values())


class SpanBook:
    """The orchestrator's side: which of a pipeline's spans are open in the recorder."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        #: (pipeline_id, span id) -> the recorder's token of the open span.
        self._tokens: dict[tuple[str, int], int] = {}
        #: Spans ended at their pipeline's removal: what its last flush still says of them is stale.
        self._cut: set[tuple[str, int]] = set()

    def add(self, pipeline_id: str, ended: list[Span], still_open: list[Span] | None) -> None:
        for span_id, pid, *row in ended:
            key = (pid, span_id)
            token = self._tokens.pop(key, None)
            if token is not None:
                self.recorder.close_activity(token, row[-1])
            elif key not in self._cut:
                self.recorder.add_activity(pid, *row)
        if still_open is None:
            return
        now_open = {span[0] for span in still_open}
        for key in [k for k in self._tokens if k[0] == pipeline_id and k[1] not in now_open]:
            self.recorder.close_activity(self._tokens.pop(key), None)  # dropped by the actor
        for span_id, pid, *span in still_open:
            key = (pid, span_id)
            if key not in self._tokens and key not in self._cut:
                self._tokens[key] = self.recorder.open_activity(pid, *span)

    def cut(self, pipeline_id: str, now: float) -> None:
        """The pipeline was removed at `now`: its open spans end there."""
        for key in [k for k in self._tokens if k[0] == pipeline_id]:
            self.recorder.close_activity(self._tokens.pop(key), now)
            self._cut.add(key)
