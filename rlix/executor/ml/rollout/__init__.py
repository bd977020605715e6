"""Rollout (generation) backends behind one interface: `hf` (transformers) and `vllm` (lazy).

`make_backend(name, ...)` picks one by the scenario's backend name; the vllm module is only
imported when asked for, so CPU machines never import vLLM.
"""

from __future__ import annotations

from typing import Any

from rlix.executor.ml.rollout.base import (
    AdapterWeights,
    Completion,
    FinishReason,
    FullWeights,
    GenerationRequest,
    RolloutBackend,
    SamplingParams,
    resume_request,
)

BACKEND_NAMES = ("hf", "vllm")


def make_backend(name: str, model_path: str, **options: Any) -> RolloutBackend:
    """Build the backend called `name` for the model folder `model_path`."""
    if name == "hf":
        from rlix.executor.ml.rollout.hf import HfBackend

        return HfBackend(model_path, **options)
    if name == "vllm":
        from rlix.executor.ml.rollout.vllm_backend import VllmBackend

        return VllmBackend(model_path, **options)
    raise ValueError(
        f"unknown rollout backend {name!r}; known backends: {', '.join(BACKEND_NAMES)}"
    )


__all__ = [
    "AdapterWeights",
    "BACKEND_NAMES",
    "Completion",
    "FinishReason",
    "FullWeights",
    "GenerationRequest",
    "RolloutBackend",
    "SamplingParams",
    "make_backend",
    "resume_request",
]
