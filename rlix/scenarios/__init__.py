"""Scenarios: the one input both drivers take (topology, pipelines, trace, policy, faults).

    from rlix.scenarios import load_scenario
    scenario = load_scenario("agentic-4x32")          # or a path to a YAML file
    specs = scenario.pipeline_specs("static")         # PipelineSpec per pipeline id
    topology, config = scenario.topology(), scenario.policy_config()

Bad input raises one `ScenarioError` naming the file, line, field path and value.
"""

from rlix.scenarios.errors import ScenarioError
from rlix.scenarios.gpusets import format_gpu_set, parse_gpu_set
from rlix.scenarios.load import bundled_scenarios, load_scenario, parse_scenario, validate_scenario
from rlix.scenarios.models import MODELS, ModelShape, model_shape
from rlix.scenarios.pipelines import AdapterConfig, ClusterConfig, ClustersConfig, PipelineConfig
from rlix.scenarios.schema import Scenario
from rlix.scenarios.sections import (
    EngineConfig,
    ExecutorConfig,
    FaultEvent,
    FaultsConfig,
    PolicySection,
    PolicyTunables,
    TopologyConfig,
    TraceRef,
)
from rlix.scenarios.specs import home_bundles

__all__ = [
    "MODELS",
    "AdapterConfig",
    "ClusterConfig",
    "ClustersConfig",
    "EngineConfig",
    "ExecutorConfig",
    "FaultEvent",
    "FaultsConfig",
    "ModelShape",
    "PipelineConfig",
    "PolicySection",
    "PolicyTunables",
    "Scenario",
    "ScenarioError",
    "TopologyConfig",
    "TraceRef",
    "bundled_scenarios",
    "format_gpu_set",
    "home_bundles",
    "load_scenario",
    "model_shape",
    "parse_gpu_set",
    "parse_scenario",
    "validate_scenario",
]
