"""Each job's time alone on its home, simulated: the runtime estimate of EASY backfill and the
denominator of a job's slowdown.

A job's *alone time* is its JCT when it is the only pipeline of the scenario, arriving at 0,
confined to its home (the `static` policy), with no faults (`rlix.sim.api.alone_on_home`).

Streams of experiments repeat a few templates, so runs are shared between pipelines whose
configuration is the same but for id and arrival (`signature`): a day of 200 jobs from four
templates costs a handful of alone runs, not 200. Sharing is an approximation in one respect:
the simulator draws each pipeline's batches from a seed salted with its id, so two jobs of the
same template see different samples of the same trace. `exact=True` runs each job with its
own id (what the job metrics of a small scenario may want).
"""

from __future__ import annotations

import json
from typing import Any

from rlix.scenarios import Scenario


def signature(scenario: Scenario, pipeline_id: str, exact: bool = False) -> str:
    """What decides a pipeline's alone time: its configuration (less its id and arrival,
    unless `exact`) and the scenario's pool, costs, engine and seed."""
    pipeline: dict[str, Any] = scenario.pipeline(pipeline_id).model_dump(mode="json", exclude_none=True)
    pipeline.pop("arrival_s", None)
    if not exact:
        pipeline.pop("id", None)
    context = {
        "topology": scenario.topology_config.model_dump(mode="json"),
        "costs": dict(scenario.costs),
        "engine": scenario.engine.model_dump(mode="json"),
        "seed": scenario.seed,
        "max_time_s": scenario.max_time_s,
        "pipeline": pipeline,
    }
    return json.dumps(context, sort_keys=True)


def alone_jct_s(scenario: Scenario, exact: bool = False, cache: dict[str, tuple[float, bool]] | None = None,
                cut: bool = False) -> dict[str, float]:
    """Each pipeline's alone time in seconds, by pipeline id (runs shared by `signature`;
    pass `cache` to share them across calls, e.g. the policies of one comparison).

    An alone run has the time its pipeline had in a scenario cut at `max_time_s`; one that did
    not end in it has no alone time (left out: its slowdown is unknown, not its JCT over the
    cut), or with `cut`, the time it ran, which its alone time exceeds (a runtime estimate that
    errs short, as a Slurm time limit given too low)."""
    from rlix.sim.api import alone_on_home, simulate

    runs = {} if cache is None else cache
    out: dict[str, float] = {}
    for pipeline in scenario.pipelines:
        key = signature(scenario, pipeline.id, exact)
        if key not in runs:
            summary = simulate(alone_on_home(scenario, pipeline.id), plots=False).summary
            runs[key] = (float(summary["makespan_s"]), bool(summary.get("finished", True)))
        time_s, finished = runs[key]
        if finished or cut:
            out[pipeline.id] = time_s
    return out
