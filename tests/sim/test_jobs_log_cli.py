"""--trace and --jobs on a scenario: --trace replaces the trace of every pipeline, those a job
log or a stream adds too; --jobs drives a file of templates alone as `jobs:` in it does, and
adds to the file's own log."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlix.sim.api import resolve_scenario
from rlix.sim.cli import main

TEMPLATES = """\
name: tmpl
topology: {num_nodes: 1, gpus_per_node: 4, gpu: h100}
trace: {bundled: math_small, max_response_tokens: 4096}
templates:
  small:
    kind: full_finetune
    algorithm: grpo
    model: 1.5b
    home: 2
    clusters: {actor_train: {tp: 1, gpus: home}, actor_infer: {tp: 1, gpus: pool}}
    prompts_per_step: 4
    samples_per_prompt: 4
    steps: 2
    max_staleness: 0
    trace: {bundled: agentic_small, max_response_tokens: 4096}
"""
BASE = """\
pipelines:
  - id: base
    kind: full_finetune
    algorithm: grpo
    model: 1.5b
    home: 0-1
    clusters: {actor_train: {tp: 1, gpus: 0-1}, actor_infer: {tp: 1, gpus: 0-3}}
    prompts_per_step: 4
    samples_per_prompt: 4
    steps: 2
    max_staleness: 0
"""


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "templates.yaml").write_text(TEMPLATES)
    (tmp_path / "with_base.yaml").write_text(TEMPLATES + BASE)
    (tmp_path / "log.csv").write_text("id,template,arrival\nj1,small,0\nj2,small,5\n")
    (tmp_path / "trace.csv").write_text("response_tokens\n10\n20\n30\n")
    return tmp_path


def _traces(folder: Path) -> dict[str, object]:
    data = yaml.safe_load((folder / "scenario.yaml").read_text())
    traces: dict[str, object] = {p["id"]: p["trace"] for p in data["pipelines"]}
    traces.update({f"template {name}": t["trace"] for name, t in data["templates"].items()})
    return traces


def test_trace_replaces_the_trace_of_the_jobs_a_log_adds(files: Path) -> None:
    out = files / "run"
    args = ["run", str(files / "with_base.yaml"), "--jobs", str(files / "log.csv"), "--trace",
            str(files / "trace.csv"), "--no-alone", "--quiet", "--out", str(out)]
    assert main(args) == 0
    ref = {"path": str((files / "trace.csv").resolve()), "columns": {}}
    assert _traces(out) == {"base": ref, "j1": ref, "j2": ref, "template small": ref}


def test_trace_replaces_the_trace_of_a_streams_jobs_and_a_log_rows_own(files: Path) -> None:
    (files / "log.jsonl").write_text('{"id": "j1", "template": "small", "arrival": 0, '
                                     '"trace": {"bundled": "math_16k"}}\n')
    stream = "stream: {seed: 1, duration_s: 600, arrivals: [{template: small, per_hour: 30, " \
             "trace: {bundled: math_16k}}]}\n"
    (files / "stream.yaml").write_text(TEMPLATES + stream)
    trace = files / "trace.csv"
    scenario = resolve_scenario(files / "stream.yaml", trace=trace, jobs=files / "log.jsonl")
    assert len(scenario.pipelines) >= 2 and {p.id for p in scenario.pipelines} >= {"j1", "small-0"}
    assert {p.trace.path for p in scenario.pipelines} == {str(trace.resolve())}  # type: ignore[union-attr]
    assert scenario.templates["small"]["trace"]["path"] == str(trace.resolve())


def test_jobs_drive_a_scenario_of_templates_alone(files: Path) -> None:
    by_option = resolve_scenario(files / "templates.yaml", jobs=files / "log.csv")
    (files / "in_file.yaml").write_text(TEMPLATES + "jobs: {path: log.csv}\n")
    in_file = resolve_scenario(files / "in_file.yaml")
    assert [p.id for p in by_option.pipelines] == ["j1", "j2"]
    assert by_option.model_dump() == in_file.model_dump()


def test_jobs_drive_a_scenario_of_templates_alone_from_the_cli(files: Path) -> None:
    out = files / "run"
    assert main(["run", str(files / "templates.yaml"), "--jobs", str(files / "log.csv"), "--no-alone",
                 "--quiet", "--out", str(out)]) == 0
    assert [p["id"] for p in yaml.safe_load((out / "scenario.yaml").read_text())["pipelines"]] == ["j1", "j2"]


def test_jobs_add_to_the_scenarios_own_log(files: Path) -> None:
    (files / "in_file.yaml").write_text(TEMPLATES + "jobs: {path: log.csv}\n")
    (files / "more.csv").write_text("id,template,arrival\nk1,small,1\n")
    scenario = resolve_scenario(files / "in_file.yaml", jobs=files / "more.csv")
    assert [p.id for p in scenario.pipelines] == ["j1", "j2", "k1"]
