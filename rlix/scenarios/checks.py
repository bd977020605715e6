"""Checks across a scenario's fields: GPU ranges and TP bundles, homes, specs, faults.

Homes may overlap (a pool may hold more pipelines than fit at once). A home given as a size
must fit the pool in whole chunks of its clusters' TP bundles (rlix.policy.homes), which is
checked by placing it on the empty pool and validating the spec that gives.

Cluster mappings and whole pipelines are checked by the policy core's own
`ClusterSpec.validate` / `PipelineSpec.validate` (for the scenario's mappings and for the
static confinement), their `SpecError` turned into a `FieldProblem` at the scenario's field path.
Every problem is raised as a `FieldProblem` whose path starts at the scenario's root.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

from rlix.policy import ROLLOUT_CLUSTER, SpecError, Topology
from rlix.policy.homes import choose_home, max_placeable, placement_unit, resolve
from rlix.scenarios.errors import FieldProblem, Path
from rlix.scenarios.gpusets import format_gpu_set
from rlix.scenarios.pipelines import PipelineConfig
from rlix.scenarios.specs import STATIC, home_bundles, pipeline_spec

if TYPE_CHECKING:
    from rlix.scenarios.schema import Scenario


def check_scenario(scenario: Scenario) -> None:
    """Raise FieldProblem (path from the root) for the first cross-field problem found."""
    topology = scenario.topology()
    index_of: dict[str, int] = {}
    for index, pipeline in enumerate(scenario.pipelines):
        at: Path = ("pipelines", index)
        if pipeline.id in index_of:
            raise FieldProblem(
                (*at, "id"), pipeline.id, f"duplicate pipeline id (also pipelines[{index_of[pipeline.id]}])"
            )
        index_of[pipeline.id] = index
        check_pipeline(pipeline, at, topology)
    _check_faults(scenario, index_of, topology)


def check_pipeline(pipeline: PipelineConfig, at: Path, topology: Topology) -> None:
    """The checks of one pipeline against the pool (also run on stream templates, at their
    own path, so a template's problem is named there and not at each job it makes)."""
    _check_clusters(pipeline, at, topology)
    if isinstance(pipeline.home, int):
        _check_home_size(pipeline, at, topology)
    else:
        _check_home(pipeline, at, topology)
    for policy in ("rlix", STATIC):  # every other policy uses the specs of one of these
        try:
            spec = pipeline_spec(pipeline, topology, policy)
            spec.validate(topology)
            if not spec.placed:  # a size: as the core would place it on the empty pool
                home = _empty_pool_home(spec.home_size, placement_unit(spec), topology)
                resolve(spec, home, topology, confine=policy == STATIC).validate(topology)
        except SpecError as exc:
            raise _at(exc, pipeline, at) from None


@functools.lru_cache(maxsize=256)
def _empty_pool_home(size: int, unit: int, topology: Topology) -> tuple[int, ...]:
    """Where the core would place a home of `size` GPUs on the empty pool: the same for every
    job of a stream's template, so placed once per size (a 1,000-job stream loads seconds
    sooner)."""
    return choose_home(size, unit, range(topology.num_gpus), topology) or ()


def _at(exc: SpecError, pipeline: PipelineConfig, at: Path) -> FieldProblem:
    """The SpecError's field (``<pid>.clusters.actor_infer.mapping``) as a scenario path."""
    prefix = pipeline.id + "."
    rest = exc.field[len(prefix) :] if exc.field.startswith(prefix) else exc.field
    parts = tuple("gpus" if part == "mapping" else part for part in rest.split("."))
    return FieldProblem((*at, *parts), exc.value, exc.problem)


def _check_clusters(pipeline: PipelineConfig, at: Path, topology: Topology) -> None:
    for name, cluster in pipeline.clusters.present().items():
        if cluster.scope:
            continue  # mapped from the home: checked with the whole spec
        try:
            cluster.spec().validate(f"{pipeline.id}.clusters.{name}", topology)
        except SpecError as exc:
            raise _at(exc, pipeline, at) from None


def _check_home(pipeline: PipelineConfig, at: Path, topology: Topology) -> None:
    """In range, no repeats, holds the training clusters, and cuts into whole rollout TP
    bundles (the static confinement needs that). Other homes may overlap it."""
    home, where = pipeline.home_gpus, (*at, "home")
    if not home:
        raise FieldProblem(where, [], "names no GPU (every pipeline needs a home)")
    seen: set[int] = set()
    for gpu in home:
        if not 0 <= gpu < topology.num_gpus:
            raise FieldProblem(where, gpu, f"GPU id outside the cluster [0, {topology.num_gpus})")
        if gpu in seen:
            raise FieldProblem(where, gpu, "GPU named twice in the home")
        seen.add(gpu)
    for name, cluster in pipeline.clusters.present().items():
        if name == ROLLOUT_CLUSTER or cluster.scope:
            continue
        outside = [g for g in cluster.listed if g not in seen]
        if outside:
            raise FieldProblem(
                (*at, "clusters", name, "gpus"),
                format_gpu_set(cluster.listed),
                f"GPUs {format_gpu_set(outside)} are outside the pipeline's home "
                f"{format_gpu_set(home)} (only actor_infer may reach beyond the home)",
            )
    try:
        home_bundles(home, pipeline.clusters.actor_infer.tp, topology)
    except FieldProblem as exc:
        raise FieldProblem((*at, *exc.path), exc.value, exc.problem) from None


def _check_home_size(pipeline: PipelineConfig, at: Path, topology: Topology) -> None:
    """Every cluster follows the home; the size fits the pool in whole TP bundles."""
    size = pipeline.home_size
    for name, cluster in pipeline.clusters.present().items():
        if not cluster.scope:
            raise FieldProblem(
                (*at, "clusters", name, "gpus"),
                format_gpu_set(cluster.listed),
                f"with a home given as a size ({size}), every cluster says `gpus: home` or `gpus: pool` "
                "(the GPUs are known only once the policy places the home)",
            )
    tps = sorted({c.tp for c in pipeline.clusters.present().values()})
    unit = math.lcm(*tps)
    if size > topology.num_gpus:
        raise FieldProblem((*at, "home"), size, f"is larger than the pool ({topology.num_gpus} GPUs)")
    if size % unit or size > max_placeable(unit, topology):
        raise FieldProblem(
            (*at, "home"),
            size,
            f"cannot be placed in whole TP bundles of {unit} GPU(s) inside {topology.gpus_per_node}-GPU nodes "
            f"(TP sizes {tps}; at most {max_placeable(unit, topology)} GPUs, a multiple of {unit})",
        )


def _check_faults(scenario: Scenario, index_of: dict[str, int], topology: Topology) -> None:
    lost_until: dict[int, tuple[float, float, int]] = {}
    killed: dict[str, int] = {}
    events = sorted(enumerate(scenario.faults.events), key=lambda item: item[1].at_s)
    for index, event in events:
        at: Path = ("faults", "events", index)
        if event.kill is not None:
            pid = event.kill
            if pid not in index_of:
                raise FieldProblem((*at, "kill"), pid, f"no such pipeline (ids: {', '.join(index_of)})")
            if pid in killed:
                raise FieldProblem((*at, "kill"), pid, f"already killed by faults.events[{killed[pid]}]")
            arrival = scenario.pipelines[index_of[pid]].arrival_s
            if event.at_s < arrival:
                raise FieldProblem(
                    (*at, "at_s"), event.at_s, f"before pipeline {pid!r} arrives (arrival_s={arrival})"
                )
            killed[pid] = index
        for gpu in event.lose_gpu or ():
            if not 0 <= gpu < topology.num_gpus:
                raise FieldProblem(
                    (*at, "lose_gpu"), gpu, f"GPU id outside the cluster [0, {topology.num_gpus})"
                )
            start, end, other = lost_until.get(gpu, (0.0, 0.0, -1))
            if other >= 0 and event.at_s < end:
                raise FieldProblem(
                    (*at, "at_s"),
                    event.at_s,
                    f"GPU {gpu} is still lost then (faults.events[{other}] from {start} to {end})",
                )
            lost_until[gpu] = (event.at_s, event.until_s, index)
