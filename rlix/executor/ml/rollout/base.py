"""The rollout backend interface: requests, completions, weight payloads, and the ABC.

A rollout rank generates for a batch of requests, can be interrupted (a shrink takes its GPUs
back), reports the partial prefixes, and resumes them elsewhere later: the prefix is passed back
in as `prefix_token_ids` and recomputed, never lost. Weights arrive as versioned payloads: the
whole model (full finetune) or one adapter's LoRA tensors (multi-LoRA), and every completion
says which version generated it, so staleness can be accounted for.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import torch


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0 means greedy; top_k 0 and top_p 1.0 mean no truncation."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"sampling.temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"sampling.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"sampling.top_k must be >= 0, got {self.top_k}")


@dataclass(frozen=True)
class GenerationRequest:
    """One trajectory to generate. `max_new_tokens` counts the prefix too (the response cap)."""

    request_id: str
    prompt_token_ids: tuple[int, ...]
    max_new_tokens: int
    prefix_token_ids: tuple[int, ...] = ()
    prefix_log_probs: tuple[float, ...] = ()
    adapter: str | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)

    def __post_init__(self) -> None:
        if not self.prompt_token_ids:
            raise ValueError(f"request {self.request_id!r}: empty prompt_token_ids")
        if self.max_new_tokens < 1:
            raise ValueError(f"request {self.request_id!r}: max_new_tokens must be >= 1")
        if len(self.prefix_token_ids) > self.max_new_tokens:
            raise ValueError(
                f"request {self.request_id!r}: prefix of {len(self.prefix_token_ids)} tokens "
                f"exceeds max_new_tokens={self.max_new_tokens}"
            )
        if self.prefix_log_probs and len(self.prefix_log_probs) != len(self.prefix_token_ids):
            raise ValueError(f"request {self.request_id!r}: prefix_log_probs length mismatch")


class FinishReason(StrEnum):
    STOP = "stop"  # end-of-sequence token generated (it is the last of token_ids)
    LENGTH = "length"  # max_new_tokens reached
    INTERRUPTED = "interrupted"  # stopped early: resume with resume_request()


@dataclass(frozen=True)
class Completion:
    """The response so far. token_ids includes the request's prefix; log_probs match token_ids.

    Log-probs are the model's raw ones (before temperature / top-k / top-p), as vLLM reports by
    default; prefix tokens keep the log-probs the request carried (NaN when it carried none).
    `weight_version` is the oldest version that generated tokens in this call; `num_prefix_tokens`
    counts the tokens that were recomputed (prefilled) rather than generated.
    """

    request_id: str
    token_ids: tuple[int, ...]
    log_probs: tuple[float, ...]
    finish_reason: FinishReason
    weight_version: int
    adapter: str | None
    num_prefix_tokens: int

    @property
    def finished(self) -> bool:
        return self.finish_reason is not FinishReason.INTERRUPTED


def resume_request(request: GenerationRequest, partial: Completion) -> GenerationRequest:
    """The request that continues an interrupted completion where it stopped."""
    if partial.request_id != request.request_id:
        raise ValueError(f"resume_request: {partial.request_id!r} != {request.request_id!r}")
    return replace(request, prefix_token_ids=partial.token_ids, prefix_log_probs=partial.log_probs)


@dataclass(frozen=True)
class FullWeights:
    """A whole model's weights (host tensors, keyed as in the model's state_dict) at a version."""

    version: int
    state_dict: Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class AdapterWeights:
    """One LoRA adapter at a version: its peft config (as a dict) and its tensors.

    Tensor names are peft's saved names (`get_peft_model_state_dict`: adapter name removed), so
    the payload can be written as a standard adapter folder for vLLM or loaded with peft.
    """

    name: str
    version: int
    config: Mapping[str, Any]
    state_dict: Mapping[str, torch.Tensor]


StopCheck = Callable[[], bool]


class RolloutBackend(ABC):
    """What a rollout rank can do. One generate call at a time; interrupt() from any thread.

    Life cycle: constructed asleep (no weights on the device), `load()` puts the weights on,
    `generate()` runs, `interrupt()` makes a running and any later generate return partial
    completions at the next chunk boundary until `load()` or `clear_interrupt()`, `offload()`
    drops weights and cache from the device.
    """

    def __init__(self) -> None:
        self._interrupted = threading.Event()

    @abstractmethod
    def load(self, weights: FullWeights | None = None) -> None:
        """Put the model on the device (newest `weights` if given, else what it last had)."""

    @abstractmethod
    def offload(self) -> None:
        """Free the device: weights and cache (a later load() brings them back)."""

    @property
    @abstractmethod
    def is_loaded(self) -> bool: ...

    @abstractmethod
    def update_weights(self, weights: FullWeights) -> None:
        """Replace the whole model's weights in place (the rank must be loaded)."""

    @abstractmethod
    def update_adapter(self, adapter: AdapterWeights) -> None:
        """Add or replace one LoRA adapter; the base and other adapters are untouched."""

    @abstractmethod
    def weight_version(self, adapter: str | None = None) -> int:
        """Version of the base weights (adapter None) or of one adapter."""

    @abstractmethod
    def generate(
        self, requests: Sequence[GenerationRequest], should_stop: StopCheck | None = None
    ) -> list[Completion]:
        """Complete every request (same order); stop early when interrupted or should_stop()."""

    def interrupt(self) -> None:
        """Make generation return partial completions at its next chunk boundary. Thread-safe."""
        self._interrupted.set()

    def clear_interrupt(self) -> None:
        self._interrupted.clear()

    def _stop_requested(self, should_stop: StopCheck | None) -> bool:
        return self._interrupted.is_set() or (should_stop is not None and should_stop())

    def _stopped(self, active: Sequence[Any], should_stop: StopCheck | None) -> bool:
        """Whether generation stops now; if it does, the `active` requests' states (anything
        with a `reason`) are marked interrupted, so their partial completions are returned."""
        if not self._stop_requested(should_stop):
            return False
        for state in active:
            state.reason = FinishReason.INTERRUPTED
        return True
