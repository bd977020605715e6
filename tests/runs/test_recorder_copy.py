"""A recorder copied piece by piece (`since` / `extend`) equals the original: the executor's
driver keeps such a copy so that a dead orchestrator does not take the record with it."""

from __future__ import annotations


def test_a_recorder_copied_in_pieces_equals_the_original() -> None:
    """The executor's driver keeps a copy of the orchestrator's record, pulled a piece at a time
    (the copy starts with the same header line, as the driver's does)."""
    import copy as copying

    from rlix.policy.config import PolicyConfig
    from rlix.runs.recorder import Recorder
    from tests.runs.fake_run import two_pipeline_run

    source = two_pipeline_run()
    source.add_prefetch("a", 7.0)
    source.add_prefetch("b", 3.0)
    early = copying.deepcopy(source)  # the same record as it stood part way through
    for name in ("event_lines", "allocations", "activity", "waits", "steps", "prefetches"):
        setattr(early, name, getattr(early, name)[: len(getattr(early, name)) // 2 + 1])
    early.rollouts = {name: column[: len(column) // 2] for name, column in early.rollouts.items()}
    mirror = Recorder(source.topology, "rlix", PolicyConfig())
    assert mirror.event_lines == source.event_lines[:1]
    for part in (early, source, source):
        mirror.extend(part.since(mirror.cursor()))
    assert mirror.cursor() == source.cursor()
    for name in ("event_lines", "allocations", "activity", "waits", "steps", "rollouts", "prefetches"):
        assert getattr(mirror, name) == getattr(source, name), name
    assert mirror.prefetch_s == {"a": 7.0, "b": 3.0}
