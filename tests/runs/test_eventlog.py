"""What the event log says beside the tables: a pipeline's spec as placed at each time."""

from __future__ import annotations

import json

from rlix.runs import codec
from rlix.runs.eventlog import facts_from_lines
from tests.policy.builders import full_finetune


def _place(now: float, home: tuple[int, ...]) -> str:
    decision = {"type": "Place", "decision_id": int(now), "pipeline_id": "A", "home": list(home),
                "mappings": {"actor_train": list(home), "actor_infer": [0, 1, 2, 3]}}
    return json.dumps({"event": {"type": "PipelineAdmitted", "now": now, "pipeline_id": "A"}, "decisions": [decision]})


def test_a_home_placed_twice_is_known_at_each_time() -> None:
    """A resumed run places a sized home again (here elsewhere): before the second placement
    the first holds, from it on the second; the facts' specs are the last placement's."""
    spec = full_finetune("A", (0, 1, 2, 3), (0, 1))
    registered = json.dumps({"event": {"type": "PipelineRegistered", "now": 0.0, "spec": codec.spec_to_dict(spec)},
                             "decisions": []})
    facts = facts_from_lines([registered, _place(0.0, (0, 1)), _place(30.0, (2, 3))])
    at = {t: facts.spec_at("A", t) for t in (0.0, 29.0, 30.0, 99.0)}
    assert {t: s.clusters["actor_train"].mapping for t, s in at.items() if s is not None} == {
        0.0: (0, 1), 29.0: (0, 1), 30.0: (2, 3), 99.0: (2, 3)}
    assert facts.specs["A"].clusters["actor_train"].mapping == (2, 3)
    assert facts.spec_at("B", 5.0) is None
