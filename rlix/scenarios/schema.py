"""`Scenario`: the one input both drivers take (see DESIGN.md, "Above the core").

A scenario is built by `rlix.scenarios.load_scenario` (bundled name or YAML file) or
`parse_scenario` (YAML text); both resolve every default, so a loaded scenario says everything
explicitly: each pipeline has its trace (the scenario's `trace` unless it gives its own) and each
adapter its staleness bound, steps and trace (the pipeline's unless it gives its own).
`to_yaml()` writes that resolved form; loading it back gives an equal scenario.
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from rlix.policy import POLICIES, PipelineSpec, PolicyConfig, Topology
from rlix.scenarios.checks import check_scenario
from rlix.scenarios.costs import resolve_costs
from rlix.scenarios.errors import Path, ScenarioError
from rlix.scenarios.pipelines import PipelineConfig
from rlix.scenarios.sections import (
    NAME_PATTERN,
    EngineConfig,
    ExecutorConfig,
    FaultsConfig,
    PolicySection,
    Section,
    TopologyConfig,
    TraceRef,
)
from rlix.scenarios.source import SourceMap, dump_yaml
from rlix.scenarios.specs import pipeline_spec
from rlix.scenarios.streams import expand


class Scenario(Section):
    """A workload to run: the GPU pool, the pipelines, their trace, the policy, faults."""

    name: str = Field(pattern=NAME_PATTERN)
    """Scenario name (a bundled scenario's name is its file name)."""
    description: str = ""
    """What the scenario is and where its shape comes from (cite the source)."""
    # Below 2**64 (numpy's seeds are 64-bit words anyway): an integer of thousands of digits
    # is read but cannot be written back to the run folder's JSON.
    seed: int = Field(0, ge=0, lt=2**64)
    """Seed of every random draw a driver makes (trace sampling, injected decision failures)."""
    max_time_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Stop the run at this time even if pipelines have steps left; None: run to the end."""
    topology_config: TopologyConfig = Field(alias="topology")
    """The GPU pool (YAML key `topology`; `topology()` gives the core's Topology)."""
    policy: PolicySection = Field(default_factory=PolicySection)
    """The policy and its tunables."""
    trace: TraceRef | None = None
    """Default rollout-length trace of every pipeline that gives none."""
    engine: EngineConfig = Field(default_factory=EngineConfig)
    """Rollout engine parameters (simulator)."""
    costs: dict[str, float] = {}
    """Overrides of the simulator's cost model by constant name (the simulator checks names),
    or the path of a calibrated cost file (`rlix-sim calibrate`; relative to the scenario
    file), whose constants it becomes when loaded (rlix.scenarios.costs)."""
    templates: dict[str, dict[str, Any]] = {}
    """Pipelines without id and arrival_s, by name, for a `stream:` or a job log to use."""
    pipelines: list[PipelineConfig] = Field(min_length=1)
    """The pipelines, at least one: those written here, then those a `stream:` of `templates:`
    expands into (rlix.scenarios.streams; neither key is left in a loaded scenario)."""
    faults: FaultsConfig = Field(default_factory=FaultsConfig)
    """Injected pipeline kills, GPU losses and decision failures."""
    executor: ExecutorConfig | None = None
    """The Ray executor's settings; None: its defaults (the simulator ignores this section)."""

    # Written back under the YAML key `topology` (Section's settings are inherited).
    model_config = ConfigDict(serialize_by_alias=True)

    _source: SourceMap = PrivateAttr(default_factory=SourceMap)

    @model_validator(mode="before")
    @classmethod
    def _inherit_trace(cls, data: Any, info: ValidationInfo) -> Any:
        """Expand the stream of experiments and the job log, if any (rlix.scenarios.streams),
        then give each pipeline that names no trace the scenario's."""
        data = expand(data, (info.context or {}).get("base_dir"))
        if not isinstance(data, dict) or not isinstance(data.get("pipelines"), list):
            return data
        default = data.get("trace")
        if default is None:
            return data
        pipelines = [
            {**p, "trace": default} if isinstance(p, dict) and p.get("trace") is None else p
            for p in data["pipelines"]
        ]
        return {**data, "pipelines": pipelines}

    @field_validator("costs", mode="before")
    @classmethod
    def _costs_file(cls, value: Any, info: ValidationInfo) -> Any:
        context = info.context or {}
        return resolve_costs(value, context.get("base_dir"), context.get("source"))

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        check_scenario(self)
        return self

    def __eq__(self, other: object) -> bool:
        """Equal content (where a scenario was read from does not count)."""
        if not isinstance(other, Scenario):
            return NotImplemented
        return self.model_dump() == other.model_dump()

    __hash__ = None  # type: ignore[assignment]

    @property
    def source(self) -> SourceMap:
        """The file the scenario was read from and its fields' line numbers (may be empty)."""
        return self._source

    @property
    def num_gpus(self) -> int:
        return self.topology_config.num_gpus

    def pipeline(self, pipeline_id: str) -> PipelineConfig:
        """The pipeline with id `pipeline_id` (KeyError if none)."""
        for pipeline in self.pipelines:
            if pipeline.id == pipeline_id:
                return pipeline
        raise KeyError(pipeline_id)

    def topology(self) -> Topology:
        """The policy core's Topology."""
        return self.topology_config.spec()

    def policy_config(self) -> PolicyConfig:
        """The policy core's PolicyConfig (defaults overridden by `policy.config`)."""
        return self.policy.config.spec()

    def pipeline_specs(self, policy: str | None = None) -> dict[str, PipelineSpec]:
        """The policy core's PipelineSpec of every pipeline, by id, in scenario order.

        `policy` defaults to the scenario's. Under "static" each pipeline is confined to its
        home (see rlix.scenarios.specs); other policies get the mappings as written.
        """
        name = self.policy.name if policy is None else policy
        if name not in POLICIES:
            raise ScenarioError(
                f"unknown policy (known: {', '.join(sorted(POLICIES))})",
                file=self._source.file,
                path="policy.name",
                value=name,
            )
        topology = self.topology()
        return {p.id: pipeline_spec(p, topology, name) for p in self.pipelines}

    def with_policy(self, name: str, config: dict[str, float] | None = None) -> Scenario:
        """This scenario under policy `name` (tunables: `config`, else the current ones)."""
        from rlix.scenarios.load import validate_scenario

        data = self.model_dump(mode="json")
        data["policy"] = {"name": name, "config": data["policy"]["config"] if config is None else config}
        return validate_scenario(data, self._source)

    def to_yaml(self) -> str:
        """The resolved scenario as YAML (every default written out; None fields left out)."""
        data = self.model_dump(mode="json", exclude_none=True)
        return dump_yaml(data, sort_keys=False, default_flow_style=None, width=100)

    def field_error(self, path: Path, value: object, problem: str) -> ScenarioError:
        """A ScenarioError naming this scenario's file and the line of `path`.

        For drivers that check fields the schema leaves open, e.g.
        ``scenario.field_error(("costs", "decode_floor_s"), 3.0, "unknown cost constant")``.
        """
        return self._source.error(path, value, problem)
