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
draws a uniform integer in [a, b] per job from the same generator. Jobs are named
`<template>-<n>`, n counting each template's jobs from 0 in arrival order. The expanded jobs
follow the scenario's own `pipelines:` (which may be absent), in arrival order, and the stream
is gone from the loaded scenario: its `to_yaml()` (the run folder's scenario.yaml) lists every
pipeline, so a replay needs no generator. The templates stay (a job log given later, `--jobs`,
names them).

A job log (`jobs: {path, columns}`, or `--jobs FILE`) gives arrivals too: each row's
template with its overrides, at its own arrival (rlix.scenarios.jobs reads the file); its
jobs follow the scenario's pipelines, before the stream's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ConfigDict, Field, ValidationError

from rlix.policy import Topology
from rlix.scenarios.checks import check_pipeline
from rlix.scenarios.errors import FieldProblem
from rlix.scenarios.errors import Path as FieldPath
from rlix.scenarios.pipelines import PipelineConfig
from rlix.scenarios.sections import Section, TopologyConfig
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
    templates = _templates(data.get("templates"), data.get("trace"), _topology(data.get("topology")))
    if data.get("jobs") is not None:
        logged = sorted(_logged_jobs(data["jobs"], templates, base_dir), key=lambda p: p["arrival_s"])
        out["pipelines"] = [*(out.get("pipelines") or []), *logged]
    raw = data.get("stream")
    if raw is None:
        return out
    data = {**data, "pipelines": out.get("pipelines")}
    stream = _validated(Stream, raw, ("stream",))
    jobs: list[tuple[float, int, dict[str, Any], str]] = []
    for index, arrival in enumerate(stream.arrivals):
        at: FieldPath = ("stream", "arrivals", index)
        if arrival.template not in templates:
            raise FieldProblem((*at, "template"), arrival.template, f"unknown template (known: {', '.join(templates) or 'none'})")
        rng = np.random.default_rng([stream.seed, index])
        overrides = dict(arrival.model_extra or {})
        t = float(rng.exponential(3600.0 / arrival.per_hour))
        while t < stream.duration_s:
            fields = {key: _draw(value, rng, (*at, key)) for key, value in overrides.items()}
            jobs.append((t, index, {**templates[arrival.template], **fields}, arrival.template))
            t += float(rng.exponential(3600.0 / arrival.per_hour))
    if not jobs:
        raise FieldProblem(("stream", "duration_s"), stream.duration_s,
                           "the stream yields no job in that time (raise per_hour or duration_s)")
    jobs.sort(key=lambda job: (job[0], job[1]))
    counts: dict[str, int] = {}
    expanded = []
    for t, _index, fields, template in jobs:
        n = counts.get(template, 0)
        counts[template] = n + 1
        expanded.append({**fields, "id": f"{template}-{n}", "arrival_s": round(t, 3)})
    out["pipelines"] = [*(data.get("pipelines") or []), *expanded]
    return out


class JobLog(Section):
    path: str
    """The job log (CSV, JSON Lines or Parquet); relative to the scenario file."""
    columns: dict[str, str] = {}
    """Column map: rlix's name (id, template, arrival, a pipeline field) -> the file's."""


def _logged_jobs(raw: Any, templates: dict[str, dict[str, Any]], base_dir: str | None) -> list[dict[str, Any]]:
    from rlix.scenarios.jobs import job_pipelines, read_jobs

    log = _validated(JobLog, raw, ("jobs",))
    path = Path(log.path) if base_dir is None else Path(base_dir) / log.path
    try:
        jobs = read_jobs(path, log.columns)
    except TraceError as error:
        raise FieldProblem(("jobs", "path"), log.path, str(error)) from None
    return job_pipelines(jobs, templates, str(path))


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
        defaults = {"trace": trace} if trace is not None and template.get("trace") is None else {}
        pipeline = _validated(PipelineConfig, {**defaults, **template, "id": "template", "arrival_s": 0.0}, at)
        if topology is not None:
            check_pipeline(pipeline, at, topology)
    return {str(name): dict(template) for name, template in raw.items()}


def _draw(value: Any, rng: np.random.Generator, at: FieldPath) -> Any:
    """An override's value: [a, b] (integers, a <= b) draws a uniform integer in [a, b]."""
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        low, high = value
        if low > high:
            raise FieldProblem(at, value, "a range [a, b] needs a <= b")
        return int(rng.integers(low, high + 1))
    return value


def _validated(model: Any, data: Any, at: FieldPath) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        cause = error.get("ctx", {}).get("error")
        if isinstance(cause, FieldProblem):
            raise FieldProblem((*at, *error["loc"], *cause.path), cause.value, cause.problem) from None
        message = str(cause) if isinstance(cause, ValueError) else error["msg"]
        raise FieldProblem((*at, *error["loc"]), error.get("input"), message[:1].lower() + message[1:]) from None
