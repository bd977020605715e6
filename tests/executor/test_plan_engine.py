"""The executor runs a scenario's `engine:` as the simulator does, and its run records the engine
it ran: each rank's call takes up to `max_batch` trajectories, balanced as `balance` says; it
cannot migrate sequences to a rank that joins, so the default is recorded as false and an
explicit `migrate_on_expand: true` refused. No Ray: `plan` only checks and resolves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rlix.executor.run import ExecutorInputError, plan
from rlix.scenarios import load_scenario


def _tiny_with_engine(tmp_path: Path, engine: dict[str, Any] | None) -> Path:
    data = load_scenario("tiny").model_dump(mode="json", exclude_none=True)
    if engine is None:
        del data["engine"]
    else:
        data["engine"] = engine
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_ranks_take_the_engines_batch_and_balance(tmp_path: Path) -> None:
    the_plan = plan(str(_tiny_with_engine(tmp_path, {"max_batch": 32, "balance": True})))
    assert {(s.max_batch_per_rank, s.balance) for s in the_plan.setups} == {(32, True)}
    the_plan = plan("cpu-demo")
    assert {(s.max_batch_per_rank, s.balance) for s in the_plan.setups} == {(8, False)}


def test_the_run_records_no_migration_where_the_scenario_left_it_out(tmp_path: Path) -> None:
    the_plan = plan(str(_tiny_with_engine(tmp_path, None)))
    recorded = yaml.safe_load(the_plan.scenario.to_yaml())["engine"]
    assert recorded["migrate_on_expand"] is False and recorded["max_batch"] == 256 and recorded["balance"] is True


def test_migration_asked_for_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ExecutorInputError, match="engine.migrate_on_expand"):
        plan(str(_tiny_with_engine(tmp_path, {"migrate_on_expand": True})))
