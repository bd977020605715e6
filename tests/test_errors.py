"""The project's error types survive the copies made of them on the way to the user: a pickle
(a sweep's worker process or Ray task hands its error back to the caller) and SimPy's copy of
a failed process's exception (`type(e)(*e.args)`). A copy that cannot be made replaces the
error with an unrelated TypeError, and one made wrong loses the message or the fields."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import simpy

from rlix.policy.errors import EventError, FieldError, InvariantViolation, SpecError
from rlix.runs.errors import LivelockError, RunError
from rlix.scenarios.errors import NO_VALUE, FieldProblem, ScenarioError
from rlix.sim.cost_fields import CostFieldError
from rlix.traces.errors import TraceError

ERRORS: list[tuple[Exception, tuple[str, ...]]] = [
    (FieldError("steps", -1, "must be positive"), ("field", "value", "problem")),
    (SpecError("tp", 3, "must divide the node"), ("field", "value", "problem")),
    (EventError("pipeline_id", "p9", "unknown pipeline"), ("field", "value", "problem")),
    (InvariantViolation(6, "targets sum past the budget"), ("number", "detail")),
    (CostFieldError("train_mfu", "train_mfu must be in (0, 1]"), ("key", "problem")),
    (FieldProblem(("pipelines", 0, "home"), "0-99", "names no GPU"), ("path", "value", "problem")),
    (FieldProblem((), NO_VALUE, "give exactly one"), ("path", "value", "problem")),
    (ScenarioError("no such field", file="s.yaml", line=4, path="pipelines.0.x", value=1),
     ("file", "line", "path", "value", "has_value", "problem")),
    (ScenarioError("bad YAML", file="s.yaml"), ("file", "line", "path", "value", "has_value", "problem")),
    (RunError("no summary.json", file="runs/x", line=3), ("message", "file", "line")),
    (LivelockError("decisions undo each other"), ("message", "file", "line")),
    (TraceError("not a number", file="t.csv", line=7, column="response_tokens"),
     ("message", "file", "row", "line", "column")),
    (TraceError("negative", row=2), ("message", "file", "row", "line", "column")),
]


def _fields(error: Exception, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(error, name) for name in names}


@pytest.mark.parametrize(("error", "fields"), ERRORS, ids=lambda e: type(e).__name__ if isinstance(e, Exception) else "")
def test_a_pickled_error_is_whole(error: Exception, fields: tuple[str, ...]) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert _fields(copy, fields) == _fields(error, fields)


@pytest.mark.parametrize(("error", "fields"), ERRORS, ids=lambda e: type(e).__name__ if isinstance(e, Exception) else "")
def test_a_copy_from_args_keeps_the_message(error: Exception, fields: tuple[str, ...]) -> None:
    copy = type(error)(*error.args)
    assert type(copy) is type(error)
    assert str(copy) == str(error)


def test_no_value_stays_itself_through_a_pickle() -> None:
    assert pickle.loads(pickle.dumps(NO_VALUE)) is NO_VALUE
    assert "=" not in str(pickle.loads(pickle.dumps(FieldProblem((), NO_VALUE, "missing"))))


def test_an_error_raised_in_a_simpy_process_reaches_the_caller_as_itself() -> None:
    env = simpy.Environment()

    def fails() -> Any:
        yield env.timeout(1)
        raise EventError("pipeline_id", "p9", "unknown pipeline")

    env.process(fails())
    with pytest.raises(EventError, match="pipeline_id='p9': unknown pipeline") as caught:
        env.run()
    assert caught.value.field == "pipeline_id"
