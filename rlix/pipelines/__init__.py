"""rlix.pipelines: what one RL step of each pipeline kind does, written once (standard library only).

A pipeline program is a plain generator that yields `ops` (request a cluster, run a stage,
submit a rollout batch, wait for it, publish a weight version) and receives each op's result.
It has no clock and does no I/O: the simulator runs it with stage times from its cost model,
the executor with real work, both through the same host (`rlix.runs.host`).
"""

from rlix.pipelines.config import AdapterConfig, ProgramConfig
from rlix.pipelines.ops import (
    AwaitAllowed,
    AwaitAnyBatch,
    AwaitBatch,
    AwaitPlaced,
    Fork,
    Generate,
    Op,
    Prefetch,
    Publish,
    Release,
    Request,
    Stage,
)
from rlix.pipelines.programs import program_for

__all__ = [
    "AdapterConfig", "AwaitAllowed", "AwaitAnyBatch", "AwaitBatch", "AwaitPlaced", "Fork", "Generate", "Op",
    "Prefetch", "ProgramConfig", "Publish", "Release", "Request", "Stage", "program_for",
]
