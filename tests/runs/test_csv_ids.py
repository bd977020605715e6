"""A run written with `--format csv` reads back with its pipeline ids as written, even ids that
look like numbers ("01", "2.0") or like a missing value ("NA", "null")."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlix.runs import load
from rlix.scenarios import load_scenario
from rlix.scenarios.load import validate_scenario
from rlix.sim.cli import main


@pytest.mark.parametrize("ids", [("01", "2.0"), ("NA", "null")])
def test_csv_run_keeps_ids_that_look_like_numbers_or_missing(
    tmp_path: Path, ids: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    data = load_scenario("tiny").model_dump(mode="json", exclude_none=True)
    for pipeline, new_id in zip(data["pipelines"], ids, strict=True):
        pipeline["id"] = new_id
    validate_scenario(data)  # the renamed scenario is a valid one
    scenario = tmp_path / "ids.yaml"
    scenario.write_text(yaml.safe_dump(data))
    out = tmp_path / "run"
    assert main(["run", str(scenario), "--format", "csv", "--out", str(out), "--quiet", "--no-alone"]) == 0
    assert {p.suffix for p in out.glob("allocations.*")} == {".csv"}
    capsys.readouterr()
    assert main(["check", str(out)]) == 0, capsys.readouterr()
    run = load(out)
    for table in ("allocations", "steps", "rollouts", "activity", "waits", "jobs"):
        assert set(getattr(run, table)["pipeline_id"]) == set(ids), table
    assert main(["jobs", str(out), "--json"]) == 0
    assert ids[0] in capsys.readouterr().out
