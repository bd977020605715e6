"""Experiment streams: pipeline templates and a seeded stream of arrivals, expanded at load time.

A scenario may name `templates:` (a pipeline without `id` and `arrival_s`) and a `stream:`

    stream:
      seed: 7
      duration_s: 14400                                     # arrivals fall in [0, duration_s)
      arrivals:
        - {template: grpo7b, per_hour: 1.5}                  # Poisson arrivals
        - {template: grpo7b, per_hour: 0.5, steps: [10, 40]} # overrides; [a, b]: uniform int in [a, b]

Each `arrivals` entry is a Poisson process of `per_hour` jobs of its template: exponential gaps
drawn from its own generator, seeded by (stream seed, entry index), so an entry's jobs do not
change when another entry is added. Overrides replace template fields; `[a, b]` (two integers)
draws a uniform integer in [a, b] per job from the same generator. Overrides are checked before
any draw, so an entry passes or fails whatever the seed: each key a pipeline field other than
`id` and `arrival_s`, the template with them a valid pipeline at both ends of every range
(errors at `stream.arrivals[i].KEY`). Jobs are named `<template>-<n>`, n counting each
template's jobs from 0 in arrival order (an id another pipeline has is an error at the entry).
The expanded jobs follow the scenario's own `pipelines:` (which may be absent), in arrival
order, and the stream is gone from the loaded scenario: its `to_yaml()` (the run folder's
scenario.yaml) lists every pipeline, so a replay needs no generator. The templates stay (a job
log given later, `--jobs`, names them).

A job log (`jobs: {path, columns}`, or `--jobs FILE`) gives arrivals too: each row's
template with its overrides, at its own arrival (rlix.scenarios.jobs reads the file); its
jobs follow the scenario's pipelines, before the stream's.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ConfigDict, Field, ValidationError

from rlix.policy import Topology
from rlix.scenarios.checks import check_pipeline
from rlix.scenarios.errors import NO_VALUE, FieldProblem, first_error
from rlix.scenarios.errors import Path as FieldPath
from rlix.scenarios.pipelines import PipelineConfig
from rlix.scenarios.sections import Section, TopologyConfig
from rlix.scenarios.source import SourceMap
from rlix.traces.errors import TraceError

#: Fields a template may not give: every job of a stream has its own.
_PER_JOB = ("id", "arrival_s")


class Arrival(Section):
    """One Poisson stream of jobs of a template; other keys override template fields."""

    model_config = ConfigDict(extra="allow")

    template: str
    """The name of a template in `templates:`."""
    per_hour: float = Field(gt=0, allow_inf_nan=False)
    """Mean arrivals per hour."""


class Stream(Section):
    seed: int = Field(0, ge=0)
    """Seed of the arrival times and of the drawn overrides."""
    duration_s: float = Field(gt=0, allow_inf_nan=False)
    """Arrivals fall in [0, duration_s)."""
    arrivals: list[Arrival] = Field(min_length=1)
    """The Poisson streams, one per template use."""


def expand(data: dict[str, Any], base_dir: str | None = None) -> dict[str, Any]:
    """Scenario data with its stream and job log (rlix.scenarios.jobs) expanded into
    `pipelines` (see the module docstring); data without either is returned as it is
    (templates, if any, dropped). `base_dir` anchors a relative job log path."""
    if not isinstance(data, dict) or not {"stream", "templates", "jobs"} & set(data):
        return data
    out = {k: v for k, v in data.items() if k not in ("stream", "jobs")}
    trace, topology = data.get("trace"), _topology(data.get("topology"))
    templates = _templates(data.get("templates"), trace, topology)
    taken = _ids(out.get("pipelines"))
    if data.get("jobs") is not None:
        logged = sorted(_logged_jobs(data["jobs"], templates, base_dir, taken, trace, topology),
                        key=lambda p: p["arrival_s"])
        out["pipelines"] = [*(out.get("pipelines") or []), *logged]
    raw = data.get("stream")
    if raw is None:
        if data.get("templates") and not out.get("pipelines"):
            # pydantic's "required field missing" would not say that the templates make no job
            # by themselves, nor what does
            raise FieldProblem(("pipelines",), NO_VALUE,
                               "none given, and templates make none by themselves: give `pipelines:`, a "
                               "`stream:` of the templates or a job log (`jobs: {path, columns}`, --jobs FILE)")
        return out
    stream = _validated(Stream, raw, ("stream",))
    jobs: list[tuple[float, int, dict[str, Any], str]] = []
    for index, arrival in enumerate(stream.arrivals):
        at: FieldPath = ("stream", "arrivals", index)
        if arrival.template not in templates:
            raise FieldProblem((*at, "template"), arrival.template, f"unknown template (known: {', '.join(templates) or 'none'})")
        overrides = dict(arrival.model_extra or {})
        _check_overrides(overrides, arrival.template, templates[arrival.template], at, trace, topology)
        rng = np.random.default_rng([stream.seed, index])
        t = float(rng.exponential(3600.0 / arrival.per_hour))
        while t < stream.duration_s:
            fields = {key: _draw(value, rng) for key, value in overrides.items()}
            jobs.append((t, index, {**templates[arrival.template], **fields}, arrival.template))
            t += float(rng.exponential(3600.0 / arrival.per_hour))
    if not jobs:
        raise FieldProblem(("stream", "duration_s"), stream.duration_s,
                           "the stream yields no job in that time (raise per_hour or duration_s)")
    jobs.sort(key=lambda job: (job[0], job[1]))
    counts: dict[str, int] = {}
    expanded = []
    for t, index, fields, template in jobs:
        n = counts.get(template, 0)
        counts[template] = n + 1
        pipeline_id = f"{template}-{n}"
        if pipeline_id in taken:
            raise FieldProblem(("stream", "arrivals", index, "template"), template,
                               f"its jobs are named {template}-N, and {pipeline_id!r} is the id of "
                               f"{taken[pipeline_id]} already")
        expanded.append({**fields, "id": pipeline_id, "arrival_s": round(t, 3)})
    out["pipelines"] = [*(out.get("pipelines") or []), *expanded]
    return out


def expanded(data: Any, source: SourceMap, base_dir: str | os.PathLike[str] | None = None) -> Any:
    """`expand(data)` for a caller outside the scenario's validation (which expands the data
    itself): a problem is a ScenarioError at its line in `source`."""
    try:
        return expand(data, None if base_dir is None else os.fspath(base_dir))
    except FieldProblem as problem:
        raise source.error(problem.path, problem.value, problem.problem) from None


def replace_traces(data: Any, ref: dict[str, Any]) -> Any:
    """Scenario data with `ref` as every trace: the scenario's, each pipeline's and its
    adapters', each template's and its adapters', and a stream entry's that overrides one
    (a job log's trace column: expand first, and the jobs are pipelines)."""
    if not isinstance(data, dict):
        return data
    out = {**data, "trace": ref}
    if isinstance(data.get("pipelines"), list):
        out["pipelines"] = [_with_trace(pipeline, ref) for pipeline in data["pipelines"]]
    if isinstance(data.get("templates"), dict):
        out["templates"] = {name: _with_trace(template, ref) for name, template in data["templates"].items()}
    stream = data.get("stream")
    if isinstance(stream, dict) and isinstance(stream.get("arrivals"), list):
        arrivals = [_with_trace(a, ref) if isinstance(a, dict) and "trace" in a else a for a in stream["arrivals"]]
        out["stream"] = {**stream, "arrivals": arrivals}
    return out


def _with_trace(pipeline: Any, ref: dict[str, Any]) -> Any:
    if not isinstance(pipeline, dict):
        return pipeline
    out = {**pipeline, "trace": ref}
    if isinstance(pipeline.get("adapters"), list):
        out["adapters"] = [{**a, "trace": ref} if isinstance(a, dict) else a for a in pipeline["adapters"]]
    return out


def _ids(pipelines: Any) -> dict[str, str]:
    """The ids of the scenario's own pipelines -> where they are (`pipelines[i]`)."""
    if not isinstance(pipelines, list):
        return {}
    return {p["id"]: f"pipelines[{i}]" for i, p in enumerate(pipelines)
            if isinstance(p, dict) and isinstance(p.get("id"), str)}


class JobLog(Section):
    path: str
    """The job log (CSV, JSON Lines or Parquet); relative to the scenario file."""
    columns: dict[str, str] = {}
    """Column map: rlix's name (id, template, arrival, a pipeline field) -> the file's."""


def _logged_jobs(raw: Any, templates: dict[str, dict[str, Any]], base_dir: str | None, taken: dict[str, str],
                 trace: Any, topology: Topology | None) -> list[dict[str, Any]]:
    from rlix.scenarios.jobs import job_pipelines, read_jobs

    log = _validated(JobLog, raw, ("jobs",))
    path = Path(log.path) if base_dir is None else Path(base_dir) / log.path

    def check(pipeline: dict[str, Any]) -> None:
        _check_pipeline(pipeline, (), trace, topology)

    try:
        return job_pipelines(read_jobs(path, log.columns), templates, path, taken, check)
    except TraceError as error:
        raise FieldProblem(("jobs", "path"), log.path, str(error)) from None


def _topology(raw: Any) -> Topology | None:
    """The pool, if the data gives a valid one (else the scenario's validation says so)."""
    try:
        return TopologyConfig.model_validate(raw).spec()
    except (ValidationError, ValueError):
        return None


def _templates(raw: Any, trace: Any, topology: Topology | None) -> dict[str, dict[str, Any]]:
    """Templates by name, each checked as a pipeline would be (errors at `templates.NAME`;
    a template without a trace takes the scenario's, as pipelines do)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise FieldProblem(("templates",), raw, "must map template names to pipelines without id and arrival_s")
    for name, template in raw.items():
        at: FieldPath = ("templates", str(name))
        if not isinstance(template, dict):
            raise FieldProblem(at, template, "a template is a pipeline (kind:, model:, home:, clusters:, ...)")
        for key in _PER_JOB:
            if key in template:
                raise FieldProblem((*at, key), template[key], "each job of a stream has its own (leave it out)")
        _check_pipeline({**template, "id": "template", "arrival_s": 0.0}, at, trace, topology)
    return {str(name): dict(template) for name, template in raw.items()}


def _check_pipeline(fields: dict[str, Any], at: FieldPath, trace: Any, topology: Topology | None) -> None:
    """`fields` checked as a pipeline of the scenario would be (FieldProblem at `at`); without a
    trace it takes the scenario's `trace`."""
    defaults = {"trace": trace} if trace is not None and fields.get("trace") is None else {}
    pipeline = _validated(PipelineConfig, {**defaults, **fields}, at)
    if topology is not None:
        check_pipeline(pipeline, at, topology)


def _check_overrides(overrides: dict[str, Any], name: str, template: dict[str, Any], at: FieldPath, trace: Any,
                     topology: Topology | None) -> None:
    """A stream entry's overrides of template `name` checked before any draw, so that the
    entry passes or fails whatever the seed: each key a pipeline field, and the template with
    them a valid pipeline at both ends of every range [a, b] (FieldProblem at `at`, the entry)."""
    for key, value in overrides.items():
        if key in _PER_JOB:
            raise FieldProblem((*at, key), value, "each job of a stream has its own (leave it out)")
        if key not in OVERRIDABLE:
            raise FieldProblem((*at, key), value, _unknown(key, [*Arrival.model_fields, *OVERRIDABLE]))
        if _is_range(value) and value[0] > value[1]:
            raise FieldProblem((*at, key), value, "a range [a, b] needs a <= b")
    ranges = [key for key, value in overrides.items() if _is_range(value)]
    for end in (0, 1) if ranges else (0,):
        fields = {key: value[end] if key in ranges else value for key, value in overrides.items()}
        try:
            _check_pipeline({**template, **fields, "id": "template", "arrival_s": 0.0}, (), trace, topology)
        except FieldProblem as problem:
            head = problem.path[0] if problem.path else None
            if head in ranges and len(problem.path) == 1:
                low_high = ("low", "high")[end]
                raise FieldProblem((*at, head), overrides[head],
                                   f"its {low_high} end {overrides[head][end]}: {problem.problem}") from None
            if head in overrides:
                raise FieldProblem((*at, *problem.path), problem.value, problem.problem) from None
            raise FieldProblem(at, NO_VALUE, f"template {name!r} with these overrides: {problem}") from None


#: The pipeline fields a stream entry or a job log may override.
OVERRIDABLE = tuple(name for name in PipelineConfig.model_fields if name not in _PER_JOB)


def _unknown(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    return f"unknown field (known here: {', '.join(known)})" + (f"; did you mean {close[0]!r}?" if close else "")


def _is_range(value: Any) -> bool:
    """[a, b] of two integers (not booleans)."""
    return (isinstance(value, list) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value))


def _draw(value: Any, rng: np.random.Generator) -> Any:
    """An override's value: [a, b] (integers, a <= b: checked before) draws a uniform integer
    in [a, b]."""
    if _is_range(value):
        low, high = value
        return int(rng.integers(low, high + 1))
    return value


def _validated(model: Any, data: Any, at: FieldPath) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = first_error(exc)
        cause = error.get("ctx", {}).get("error")
        if isinstance(cause, FieldProblem):
            raise FieldProblem((*at, *error["loc"], *cause.path), cause.value, cause.problem) from None
        if error["type"] == "extra_forbidden" and len(error["loc"]) == 1:
            known = [info.alias or name for name, info in model.model_fields.items()]
            raise FieldProblem((*at, *error["loc"]), error.get("input"), _unknown(str(error["loc"][0]), known)) from None
        if error["type"] == "missing":  # its input is the mapping it is missing from: no value to show
            raise FieldProblem((*at, *error["loc"]), NO_VALUE, "required field missing") from None
        message = str(cause) if isinstance(cause, ValueError) else error["msg"]
        raise FieldProblem((*at, *error["loc"]), error.get("input"), message[:1].lower() + message[1:]) from None
