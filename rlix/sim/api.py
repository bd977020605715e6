"""`rlix.sim.simulate`: replay a scenario on the simulated cluster under a policy.

    from rlix.sim import simulate
    result = simulate("agentic-4x32", policy="rlix", out="runs/agentic")
    result.summary["overall"]["steps_per_hour"], result.tables["steps"]

The scenario is a bundled name, a YAML path or a loaded `Scenario`; `policy`, `trace` (with a
column map) and `seed` override the scenario's. With `out` the run folder is written
(`rlix.runs.folder`), the one the executor writes too. With `tables` (which tables the folder
gets, `rlix.runs.stream.TABLE_CHOICES`) the record is streamed into it as the run goes and
tables not named are never kept: a long run's memory stays bounded.
"""

from __future__ import annotations

import numbers
import operator
import os
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from rlix.policy import POLICIES
from rlix.runs.errors import RunError
from rlix.runs.stream import RunSink, open_sink
from rlix.runs.tablechoice import TABLE_CHOICES, check_tables
from rlix.scenarios import Scenario
from rlix.scenarios.errors import NO_VALUE, ScenarioError
from rlix.scenarios.load import read_scenario, validate_scenario
from rlix.scenarios.streams import expanded, replace_traces
from rlix.sim.alone import alone_jct_s
from rlix.sim.simulation import SimResult, Simulation


def resolve_scenario(
    scenario: Scenario | str | os.PathLike[str],
    policy: str | None = None,
    trace: str | os.PathLike[str] | None = None,
    columns: dict[str, str] | None = None,
    seed: int | None = None,
    *,
    jobs: str | os.PathLike[str] | None = None,
    jobs_columns: dict[str, str] | None = None,
    costs: str | os.PathLike[str] | None = None,
    max_time_s: float | None = None,
) -> Scenario:
    """The scenario with the overrides applied and validated again (errors name the field);
    `jobs` adds a job log's jobs as pipelines of its templates (rlix.scenarios.jobs), as
    `jobs:` in the file does (a file of templates alone takes its pipelines from it); `trace`
    replaces every trace: the scenario's, its pipelines', adapters' and templates', and so
    those of the jobs of its stream and job logs; `max_time_s` sets how long the run lasts at
    most (traces are sampled per step, so a run may outlast its trace's rows)."""
    _check_arguments(scenario, trace, columns, jobs, jobs_columns)
    overrides = (policy, trace, seed, jobs, max_time_s, costs)
    base_dir: Path | None = None
    if isinstance(scenario, Scenario):
        # Validated again even without overrides: a Scenario changed in memory (model_copy,
        # attribute assignment) skips pydantic's checks, and its bad values would surface deep
        # in the run (numpy's seeding, SimPy's clock) or not at all (duplicate pipeline ids).
        data: Any = scenario.model_dump(mode="json", exclude_none=True, warnings=False)
        source = scenario.source
    else:  # the file's data as written: --jobs may give all its pipelines
        data, source, base_dir = read_scenario(scenario)
    if not isinstance(data, dict) or all(value is None for value in overrides):
        return validate_scenario(data, source, base_dir)
    if costs is not None:  # a calibrated cost file (rlix-sim calibrate)
        data["costs"] = str(Path(costs).resolve())
    if max_time_s is not None:
        data["max_time_s"] = max_time_s
    if jobs is not None:
        if data.get("jobs") is not None:  # the file's own log first: --jobs adds to it
            data = expanded(data, source, base_dir)
        data["jobs"] = {"path": str(Path(jobs).resolve()), "columns": dict(jobs_columns or {})}
    if policy is not None:
        given = data.get("policy")
        data["policy"] = {**(given if isinstance(given, dict) else {}), "name": policy}
    if seed is not None:
        # A notebook's integers are often numpy's (np.arange), which the scenario's strict int refuses.
        is_integer = isinstance(seed, numbers.Integral) and not isinstance(seed, bool)
        data["seed"] = operator.index(seed) if is_integer else seed
    if trace is not None:
        ref = _trace_ref(trace, columns)
        # before the expansion, so the jobs are checked with it, and after, for a job log's
        # own trace column
        data = replace_traces(expanded(replace_traces(data, ref), source, base_dir), ref)
    given = {"seed": seed, "policy.name": policy, "max_time_s": max_time_s}
    return _validate_naming_arguments(data, source, base_dir, given)


def _check_arguments(
    scenario: object, trace: object, columns: object, jobs: object, jobs_columns: object
) -> None:
    """resolve_scenario's arguments that are wrong whatever the scenario holds, named as the
    arguments they are."""
    if not isinstance(scenario, Scenario | str | os.PathLike):  # os.fspath's TypeError names no argument
        raise TypeError(f"scenario= is a bundled scenario's name, a YAML file's path or a Scenario, "
                        f"not {type(scenario).__name__}")
    for name, mapping in (("columns", columns), ("jobs_columns", jobs_columns)):
        if mapping is not None and not isinstance(mapping, Mapping):
            raise TypeError(f"{name}= is a dict of rlix's column names to the file's "
                            f"({{'prompt_tokens': 'input_len'}}), not {mapping!r}")
    # As --column without --trace is refused: silently running with the scenario's own trace
    # would look like the mapping applied.
    if columns and trace is None:
        raise ValueError("columns= maps the columns of the trace= file: give trace= too")
    if jobs_columns and jobs is None:
        raise ValueError("jobs_columns= maps the columns of the jobs= file: give jobs= too")


def _validate_naming_arguments(
    data: Any, source: Any, base_dir: Path | None, given: Mapping[str, object]
) -> Scenario:
    """The scenario validated; a fault in a value an argument set (`given`, by field path) is
    named as that argument, not as the file's line, which does not hold that value."""
    try:
        return validate_scenario(data, source, base_dir)
    except ScenarioError as error:
        if given.get(error.path) is None:
            raise
        argument = error.path.split(".")[0]
        raise ScenarioError(error.problem, f"the {argument}= argument", None, error.path,
                            error.value if error.has_value else NO_VALUE) from None


def _trace_ref(trace: str | os.PathLike[str], columns: dict[str, str] | None) -> dict[str, Any]:
    """A trace= override as the scenario's `trace:` says it: a file, or a bundled trace's name
    (as `rlix-sim trace inspect` takes one) when no file of that name is here."""
    from rlix.traces.bundled import bundled_names

    if isinstance(trace, str) and trace in bundled_names() and not Path(trace).exists():
        if columns:
            raise ValueError(f"columns= maps a trace file's columns; the bundled trace {trace!r} has rlix's own")
        return {"bundled": trace}
    return {"path": str(Path(trace).resolve()), "columns": dict(columns or {})}


def simulate(
    scenario: Scenario | str | os.PathLike[str],
    policy: str | None = None,
    *,
    trace: str | os.PathLike[str] | None = None,
    columns: dict[str, str] | None = None,
    seed: int | None = None,
    out: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    table_format: str = "parquet",
    plots: bool = True,
    check_invariants: bool = False,
    progress: Callable[[float], None] | None = None,
    alone: bool = False,
    alone_s: dict[str, float] | None = None,
    tables: Collection[str] | None = None,
) -> SimResult:
    """Run the scenario to the end (or its `max_time_s`); return the summary and tables.
    With `alone`, each pipeline is also run alone on its home (rlix.sim.alone) for the job
    figures' `alone_s` and `slowdown` (what `rlix-sim run` does); `alone_s` gives those times
    when the caller has them. With `tables` (and `out`, which it needs) the run streams its
    record into `out` and keeps only those tables (see the module docstring); the result's
    streamed or dropped tables are then empty."""
    if progress is not None and not callable(progress):  # else a TypeError once the run is under way
        raise TypeError(f"progress= is a function of the simulated seconds so far, not {progress!r}")
    sink = None
    if tables is not None:
        if out is None:
            raise RunError("tables= chooses what the run folder gets: give out= too")
        sink = open_sink(out, _checked_tables(tables), table_format, overwrite)  # type: ignore[arg-type]
    elif out is not None:  # before the run, which can take hours; write_run checks again at the end
        from rlix.runs.folder import check_run_out

        check_run_out(out, overwrite, table_format, plots)
    try:
        sim = new_simulation(
            scenario, policy, trace=trace, columns=columns, seed=seed,
            check_invariants=check_invariants, sink=sink,
        )
        if alone_s is not None:
            sim.alone_s = alone_s  # known already (a comparison's alone runs)
        sim.run(sim.scenario.max_time_s, progress)
    except BaseException:
        if sink is not None:
            sink.discard()
        raise
    return collect(sim, out=out, overwrite=overwrite, table_format=table_format, plots=plots, alone=alone)


def _checked_tables(tables: Any) -> frozenset[str]:
    """`tables=` checked as a Python argument: a list of names (a string would be read letter
    by letter), and an error naming `tables=` where `check_tables` names --tables."""
    if isinstance(tables, str) or not isinstance(tables, Iterable):
        raise RunError(f"tables= is a list of table names (tables=['steps', 'jobs']), not {tables!r}")
    names = list(tables)
    if not all(isinstance(name, str) for name in names):
        raise RunError(f"tables={names!r}: table names are strings (known: {', '.join(TABLE_CHOICES)})")
    try:
        return check_tables(names)
    except RunError as error:
        raise RunError(f"tables={names!r}: {error.message.removeprefix('--tables: ')}") from None


def new_simulation(
    scenario: Scenario | str | os.PathLike[str],
    policy: str | None = None,
    *,
    trace: str | os.PathLike[str] | None = None,
    columns: dict[str, str] | None = None,
    seed: int | None = None,
    check_invariants: bool = False,
    sink: RunSink | None = None,
) -> Simulation:
    """`simulate` in steps, for who wants to watch a run (bench/sim_speed.py reads
    `num_completed` as it goes): `sim = new_simulation(...)`, `sim.run(max_time_s, progress)`,
    then `collect(sim, ...)`. With a `sink` (`rlix.runs.stream.open_sink`) the record streams
    into its folder, which `collect` completes (its `out` is the sink's)."""
    resolved = resolve_scenario(scenario, policy, trace, columns, seed)
    alone_runs: dict[str, tuple[float, bool]] = {}
    estimates = runtime_estimates(resolved, alone_runs)
    sim = Simulation(
        resolved, resolved.policy.name, resolved.seed, check_invariants=check_invariants,
        runtime_estimates_s=estimates, sink=sink,
    )
    if estimates is not None:  # the slowdowns' alone times: the same runs, those that ended
        sim.alone_s = alone_jct_s(resolved, cache=alone_runs)
    return sim


def runtime_estimates(scenario: Scenario,
                      cache: dict[str, tuple[float, bool]] | None = None) -> dict[str, float] | None:
    """What a policy that plans ahead (EASY backfill, rlix's shortest-first job order, rlix's
    stacking of sized homes by runtime) is told of each job's run time: its time alone on its
    home, simulated (as a Slurm user gives a time limit), for the jobs the scenario gives no
    `runtime_estimate_s`; None for other policies, or when the scenario gives every one."""
    sized_homes = any(not p.home_gpus for p in scenario.pipelines)
    if not POLICIES[scenario.policy.name].wants_runtime_estimates(scenario.policy.config.spec(), sized_homes):
        return None
    if all(p.runtime_estimate_s for p in scenario.pipelines):
        return None  # the scenario gives every one (PipelineConfig.runtime_estimate_s)
    return alone_jct_s(scenario, cache=cache, cut=True)


def collect(
    sim: Simulation,
    *,
    out: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    table_format: str = "parquet",
    plots: bool = True,
    alone: bool = False,
) -> SimResult:
    """The summary and tables of a simulation that has run; with `out`, its run folder; with
    `alone`, each pipeline's time alone on its home in the job figures."""
    from rlix.runs.folder import run_figures
    from rlix.runs.frames import tables_from_recorder

    specs = sim.placed_specs()
    alone_s = sim.alone_s
    if alone and alone_s is None:
        try:
            alone_s = alone_jct_s(sim.scenario)
        except BaseException:  # the streamed folder would stay behind, half written
            if sim.recorder.sink is not None:
                sim.recorder.sink.discard()
            raise
    if sim.recorder.sink is not None:
        return _collect_streamed(sim, specs, plots, overwrite, alone_s)
    run_tables = tables_from_recorder(sim.recorder, specs)
    summary = run_figures(run_tables, sim.recorder, alone_s=alone_s, extra_summary=run_status(sim))
    run_dir = None
    if out is not None:
        from rlix.runs.folder import check_table_format, write_run

        run_dir = write_run(
            sim.recorder,
            out,
            scenario_yaml=sim.scenario.to_yaml(),
            specs=specs,
            format=check_table_format(table_format),
            plots=plots,
            overwrite=overwrite,
            tables=run_tables,
            alone_s=alone_s,
            figures=summary,
        )
    tables = {
        name: run_tables.table(name)
        for name in ("allocations", "activity", "waits", "steps", "rollouts")
    }
    return SimResult(summary, tables, run_dir, sim.recorder, specs)


def _collect_streamed(sim: Simulation, specs: dict[str, Any], plots: bool, overwrite: bool,
                      alone_s: dict[str, float] | None) -> SimResult:
    """`collect` of a run that streamed its record: its folder is completed in place."""
    from rlix.runs.stream import finish_streamed

    run_dir, summary, run_tables = finish_streamed(
        sim.recorder, scenario_yaml=sim.scenario.to_yaml(), specs=specs, plots=plots,
        overwrite=overwrite, extra_summary=run_status(sim), alone_s=alone_s,
    )
    tables = {name: run_tables.table(name) for name in ("allocations", "activity", "waits", "steps", "rollouts")}
    return SimResult(summary, tables, run_dir, sim.recorder, specs)


def run_status(sim: Simulation) -> dict[str, Any]:
    """Whether every pipeline finished, and if not, which and why (summary.json keys)."""
    unfinished = sorted(pid for pid, host in sim.hosts.items() if host.alive)
    unfinished += sorted(pid for pid in sim.pipelines if pid not in sim.hosts)
    return {"finished": not unfinished, "unfinished": unfinished, "stalled_at_s": sim.stalled_at_s}


def alone_on_home(scenario: Scenario, pipeline_id: str) -> Scenario:
    """The scenario with only `pipeline_id`, arriving at 0, confined to its home (static), no
    faults: the pipeline's time without sharing, for slowdowns."""
    return _alone(scenario, pipeline_id, "static")


def alone_on_pool(scenario: Scenario, pipeline_id: str) -> Scenario:
    """The scenario with only `pipeline_id`, arriving at 0, under `rlix` with every GPU its
    mappings allow and nobody to share them with, no faults: the fastest it goes here."""
    return _alone(scenario, pipeline_id, "rlix")


def _alone(scenario: Scenario, pipeline_id: str, policy: str) -> Scenario:
    """Only `pipeline_id`, arriving at 0; a scenario cut at max_time_s keeps the time the
    pipeline had in it (max_time_s less its arrival), so a day's scenario stays a day."""
    data: dict[str, Any] = scenario.model_dump(mode="json", exclude_none=True)
    (pipeline,) = [p for p in data["pipelines"] if p["id"] == pipeline_id]
    data["pipelines"] = [dict(pipeline, arrival_s=0.0)]
    data["faults"] = {"events": [], "decision_failure_rate": 0.0}
    data["policy"] = {**data.get("policy", {}), "name": policy}
    if scenario.max_time_s is not None:
        data["max_time_s"] = max(scenario.max_time_s - pipeline.get("arrival_s", 0.0), 1.0)
    return validate_scenario(data, scenario.source)
