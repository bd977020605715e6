"""What the tests of the Python API share (their `client` fixture, an orchestrator of the
test's own, is in conftest.py): a handler that starts nothing, and a pipeline registered and
admitted in one call."""

from __future__ import annotations

from typing import Any

import ray

from rlix.executor.api import Client, RankHandler
from rlix.policy import ClusterSpec, PipelineKind, PipelineSpec


@ray.remote(num_cpus=0)
class Handler(RankHandler):
    """Starts and stops nothing: the orchestrator's calls are what is tested."""


def register(client: Client, prefix: str, infer: tuple[int, ...], train: tuple[int, ...],
             handler: object = None, admit: bool = True, **options: Any) -> str:
    """A full-finetune pipeline of `infer` and `train` GPUs, registered (and admitted);
    `options` go to `register_pipeline`."""
    pid = client.allocate_pipeline_id(prefix)
    client.register_pipeline(PipelineSpec(pid, PipelineKind.FULL_FINETUNE, {
        "actor_infer": ClusterSpec(1, infer), "actor_train": ClusterSpec(1, train)}), handler, **options)
    if admit:
        client.admit_pipeline(pid)
    return pid
