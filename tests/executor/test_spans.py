"""Activity spans from a pipeline actor to the record, told while they go on (no Ray): a live run
stopped in the middle of a stage or a weight load shows those GPUs at work up to the stop, in
the orchestrator's record, in the driver's copy and in the journal it keeps; spans that end,
are dropped or are cut by the pipeline's removal leave exactly one row each."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlix.executor.journal import JournalWriter, apply_cut, read_journal
from rlix.executor.spans import ActorSpans, SpanBook
from rlix.policy import PolicyConfig, Topology
from rlix.runs import Recorder

TOPOLOGY = Topology(1, 4)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _recorder() -> Recorder:
    return Recorder(TOPOLOGY, "rlix", PolicyConfig())


def _flush(actor: ActorSpans, book: SpanBook) -> None:
    book.add(actor.pipeline_id, *actor.take())


def _rows(recorder: Recorder) -> list[tuple[object, ...]]:
    return sorted({(r[0], r[1], r[2], r[4], r[5], r[6], r[7]) for r in recorder.activity}, key=str)


def test_a_span_told_open_ends_where_it_really_ends_once() -> None:
    clock, recorder = Clock(), _recorder()
    actor, book = ActorSpans("p", clock), SpanBook(recorder)
    with actor.span("actor_train", -1, (0, 1), "busy", "actor_train"):
        clock.now = 2.0
        _flush(actor, book)  # told while it goes on
        clock.now = 5.0
    _flush(actor, book)
    _flush(actor, book)  # nothing new: nothing added
    assert _rows(recorder) == [("p", "actor_train", -1, "busy", "actor_train", 0.0, 5.0)]
    recorder.finish(9.0)
    assert len(recorder.activity) == 2  # one row a GPU, not reopened by the finish


def test_a_stop_while_a_span_goes_on_ends_it_at_the_stop_in_the_copy_and_the_journal(tmp_path: Path) -> None:
    clock, recorder = Clock(), _recorder()
    actor, book = ActorSpans("p", clock), SpanBook(recorder)
    copy = _recorder()
    with actor.span("actor_infer", 0, (2, 3), "loading", "load"):
        clock.now = 1.5
        _flush(actor, book)
        piece = recorder.since(copy.cursor())  # the driver's poll
        copy.extend(piece)
        writer = JournalWriter(tmp_path / "journal.jsonl", "scenario", "v")
        writer.write(piece, {"now": 3.0})
        writer.close()
        # the stop: the actors are killed here, their span never ends
    copy.finish(3.0)
    assert _rows(copy) == [("p", "actor_infer", 0, "loading", "load", 0.0, 3.0)]
    journal = read_journal(tmp_path / "journal.jsonl", TOPOLOGY, "rlix", PolicyConfig())
    apply_cut(journal.recorder, 3.0, {}, {})  # a resume after a SIGKILL: its record ends at the cut
    assert _rows(journal.recorder) == [("p", "actor_infer", 0, "loading", "load", 0.0, 3.0)]


def test_a_dropped_span_leaves_no_row_even_after_it_was_told_open() -> None:
    clock, recorder = Clock(), _recorder()
    actor, book = ActorSpans("p", clock), SpanBook(recorder)
    with actor.span("actor_infer", 1, (1,), "busy", "rollout") as drop:
        clock.now = 1.0
        _flush(actor, book)
        drop()  # the rank's worker was found dead: the call did no work
    with pytest.raises(RuntimeError), actor.span("actor_train", -1, (0,), "busy", "init"):
        _flush(actor, book)
        raise RuntimeError("the stage failed")
    _flush(actor, book)
    recorder.finish(4.0)
    assert recorder.activity == []


def test_a_removed_pipelines_spans_end_at_its_removal_and_its_last_word_is_not_counted_twice() -> None:
    clock, recorder = Clock(), _recorder()
    actor, book = ActorSpans("p", clock), SpanBook(recorder)
    with actor.span("actor_train", -1, (0,), "busy", "actor_train"):
        clock.now = 1.0
        _flush(actor, book)
        book.cut("p", 2.0)  # killed at 2 s, its GPUs handed on
        clock.now = 6.0
    _flush(actor, book)  # what its last flush still says
    recorder.finish(8.0)
    assert _rows(recorder) == [("p", "actor_train", -1, "busy", "actor_train", 0.0, 2.0)]


def test_a_span_told_open_whose_gpus_went_back_before_the_stop_ends_with_its_holding() -> None:
    """Its end was still in the actor's next flush when the run stopped: it ends where its
    holding did, not at the stop, when another pipeline may hold those GPUs."""
    from rlix.policy import ClusterSpec, PipelineKind, PipelineSpec
    from rlix.policy import decisions as dec
    from rlix.policy import events as ev

    clock, recorder = Clock(), _recorder()
    actor, book = ActorSpans("p", clock), SpanBook(recorder)
    spec = PipelineSpec("p", PipelineKind.FULL_FINETUNE, {
        "actor_infer": ClusterSpec(1, (0, 1)), "actor_train": ClusterSpec(1, (0,))})
    recorder.on_event(ev.PipelineRegistered(0.0, spec), [])
    grant = dec.Grant(decision_id=1, pipeline_id="p", cluster="actor_train", priority=1, gpus=(0,))
    recorder.on_carry_out(grant, 0.0)
    recorder.on_report(grant, True, 0.0)
    with actor.span("actor_train", -1, (0,), "busy", "actor_train"):
        clock.now = 1.0
        _flush(actor, book)
        copy = _recorder()
        recorder.on_event(ev.ClusterReleased(2.0, "p", "actor_train"), [])
        copy.extend(recorder.since(copy.cursor()))
    copy.finish(3.0)
    assert _rows(copy) == [("p", "actor_train", -1, "busy", "actor_train", 0.0, 2.0)]
