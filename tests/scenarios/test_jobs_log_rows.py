"""A job log's rows (rlix.scenarios.jobs): a blank id, template or arrival is a missing value,
ids are read as written, and a row's problem (an id given twice, an override a pipeline
refuses) is one line naming the log, the row's line and the column, not a pipeline index."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rlix.scenarios import ScenarioError
from rlix.sim.api import resolve_scenario
from rlix.sim.cli import main
from tests.scenarios.test_jobs_log import SCENARIO

#: The scenario's templates alone: its pipelines all come from the log.
TEMPLATES_ONLY = SCENARIO[: SCENARIO.index("pipelines:")]


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    return path


@pytest.mark.parametrize(("content", "words"), [
    ("id,template,arrival\nok,small,0\n,small,5\n", "log.csv, line 3, column 'id': missing value"),
    ("id,template,arrival\n,small,0\n,small,5\n", "log.csv, line 2, column 'id': missing value"),
    ("id,template,arrival\nok,,0\n", "log.csv, line 2, column 'template': missing value"),
    ("id,template,arrival\nok,small,\n", "log.csv, line 2, column 'arrival': missing value"),
    ("id,template,arrival\nk1,small,0\nk1,small,5\n", "log.csv, line 3, column 'id': 'k1': duplicate pipeline id "
     "(also line 2)"),
    ("id,template,arrival\nfixed,small,0\n", "log.csv, line 2, column 'id': 'fixed': duplicate pipeline id "
     "(also pipelines[0])"),
    ("id,template,arrival,steps\nk1,small,0,\nk2,small,0,2.5\n", "log.csv, line 3, column 'steps': 2.5: input "
     "should be a valid integer"),
    ("id,template,arrival,steps\nk1,small,0,-1\n", "log.csv, line 2, column 'steps': -1: input should be greater than 0"),
    ("id,template,arrival,home\nk1,small,0,99\n", "log.csv, line 2, column 'home': 99: is larger than the pool"),
    ("id,template,arrival\nk1,nope,0\n", "log.csv, line 2, column 'template': 'nope': unknown template (known: small)"),
])
def test_a_bad_row_is_named_by_its_line_and_column(scenario_file: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str], content: str, words: str) -> None:
    log = tmp_path / "log.csv"
    log.write_text(content)
    out = tmp_path / "run"
    status = main(["run", str(scenario_file), "--jobs", str(log), "--out", str(out), "--quiet", "--no-alone"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and words in err, err
    assert "pipelines[1]" not in err and "pipelines[2]" not in err and "s.yaml" not in err
    assert not out.exists()


def test_the_same_from_the_scenario_names_its_jobs_line(tmp_path: Path) -> None:
    (tmp_path / "log.csv").write_text("id,template,arrival\nk1,small,0\nk1,small,5\n")
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO + "jobs: {path: log.csv}\n")
    with pytest.raises(ScenarioError) as info:
        resolve_scenario(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{SCENARIO.count(chr(10)) + 1}: jobs.path='log.csv': "), message
    assert "log.csv, line 3, column 'id': 'k1': duplicate pipeline id (also line 2)" in message


def test_a_parquet_log_names_the_row(scenario_file: Path, tmp_path: Path) -> None:
    log = tmp_path / "log.parquet"
    pd.DataFrame({"id": ["a", None], "template": ["small", "small"], "arrival": [0, 5]}).to_parquet(log)
    with pytest.raises(ScenarioError, match=r"log.parquet, row 2 \(1-based\), column 'id': missing value"):
        resolve_scenario(scenario_file, jobs=log)


def test_a_mapped_column_is_named_as_the_file_names_it(scenario_file: Path, tmp_path: Path) -> None:
    log = tmp_path / "log.csv"
    log.write_text("JobID,template,arrival\n,small,0\n")
    with pytest.raises(ScenarioError, match="line 2, column 'JobID': missing value"):
        resolve_scenario(scenario_file, jobs=log, jobs_columns={"id": "JobID"})


def test_ids_and_templates_are_read_as_written(tmp_path: Path) -> None:
    """"nan", "NA" and "01" are ids, not a missing value or the number 1."""
    path = tmp_path / "s.yaml"
    path.write_text(TEMPLATES_ONLY.replace("  small:", "  NA:"))
    log = tmp_path / "log.csv"
    log.write_text("id,template,arrival\nnan,NA,0\n01,NA,1\n1,NA,2\n")
    scenario = resolve_scenario(path, jobs=log)
    assert [p.id for p in scenario.pipelines] == ["nan", "01", "1"]
