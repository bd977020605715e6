"""The `hf` rollout backend: transformers `generate` on CPU or GPU, LoRA adapters via peft.

Generation runs in chunks of `chunk_tokens` new tokens. Between chunks the backend checks its
interrupt flag (set by `interrupt()` from another thread, e.g. when a shrink takes the rank) and
a caller's `should_stop`, so a preempted batch returns its partial prefixes within one chunk.
Each chunk re-prefills prompt + tokens so far (no KV cache kept across chunks): simple, and
cheap for the small CPU models this backend is for; vLLM is the fast path on GPUs.

Adapters need `enable_lora=True`, as with vLLM; only then is peft imported, at construction. A
full-finetune pipeline's rollout worker never imports it (seconds of every worker's start on
a CPU machine), and a multi-LoRA worker pays for it when it starts, not in its first load.

Requests are grouped per chunk by (adapter, sampling params), since one `generate` call has one
active adapter and one set of sampling params. Weight updates take the same lock as a chunk, so
they land between chunks and a completion's `weight_version` is the oldest that produced it.
"""

from __future__ import annotations

import gc
import importlib
import math
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import AutoModelForCausalLM, GenerationConfig, PreTrainedModel

from rlix.executor.ml.rollout.base import (
    AdapterWeights,
    Completion,
    FinishReason,
    FullWeights,
    GenerationRequest,
    RolloutBackend,
    SamplingParams,
    StopCheck,
)

if TYPE_CHECKING:
    from peft import PeftModel


@dataclass
class _Trajectory:
    request: GenerationRequest
    token_ids: list[int]
    log_probs: list[float]
    reason: FinishReason | None = None
    oldest_version: int | None = None
    versions: list[int] = field(default_factory=list)

    @property
    def remaining(self) -> int:
        return self.request.max_new_tokens - len(self.token_ids)


class HfBackend(RolloutBackend):
    """transformers `generate` over a model folder; starts offloaded (call `load()`)."""

    def __init__(
        self,
        model_path: str | Path,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        chunk_tokens: int = 8,
        enable_lora: bool = False,
    ) -> None:
        super().__init__()
        if chunk_tokens < 1:
            raise ValueError(f"hf backend: chunk_tokens must be >= 1, got {chunk_tokens}")
        # peft, when adapters are served: imported here so a worker's start includes it.
        self._peft: Any = importlib.import_module("peft") if enable_lora else None
        self._path = str(model_path)
        self._device = device
        self._dtype = dtype
        self._chunk_tokens = chunk_tokens
        generation_config = GenerationConfig.from_pretrained(self._path)
        eos = generation_config.eos_token_id
        self._eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
        pad = generation_config.pad_token_id
        self._pad_id = int(pad if pad is not None else min(self._eos_ids))
        self._lock = threading.Lock()
        self._model: PreTrainedModel | PeftModel | None = None
        self._host_model: PreTrainedModel | PeftModel | None = None
        self._full_weights: FullWeights | None = None
        self._version = 0
        # Newest payload per adapter, kept on the host (LoRA tensors are small) so a rank that
        # was asleep when an adapter moved on catches up in load().
        self._adapters: dict[str, AdapterWeights] = {}
        self._installed_adapter_versions: dict[str, int] = {}

    # ---- weights -------------------------------------------------------------------------

    @property
    def is_loaded(self) -> bool:
        return self._model is not None

    def load(self, weights: FullWeights | None = None) -> None:
        with self._lock:
            if weights is not None:
                self._full_weights = weights
            if self._host_model is not None:
                model, self._host_model = self._host_model, None
                model.to(self._device)  # type: ignore[arg-type]  # transformers types PreTrainedModel.to through a decorator
            else:
                model = AutoModelForCausalLM.from_pretrained(self._path)
                model = model.to(device=self._device, dtype=self._dtype).eval()  # type: ignore[call-arg]  # transformers types PreTrainedModel.to through a decorator
                self._version = 0
                self._installed_adapter_versions = {}
            self._model = model
            if self._full_weights is not None:
                self._load_full_locked(self._full_weights)
            for adapter in self._adapters.values():
                if self._installed_adapter_versions.get(adapter.name) != adapter.version:
                    self._install_adapter_locked(adapter)
        self.clear_interrupt()

    def offload(self) -> None:
        with self._lock:
            model, self._model = self._model, None
            if model is not None and self._device != "cpu":
                # Off the GPU into host memory: the next load() skips reading the folder.
                self._host_model = model.to("cpu")  # type: ignore[arg-type]  # transformers types PreTrainedModel.to through a decorator
            del model
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

    def update_weights(self, weights: FullWeights) -> None:
        with self._lock:
            self._full_weights = weights
            if self._model is None:
                raise RuntimeError("hf backend: update_weights on an offloaded rank; use load()")
            self._load_full_locked(weights)

    def update_adapter(self, adapter: AdapterWeights) -> None:
        if self._peft is None:
            raise RuntimeError("hf backend: built without enable_lora=True")
        with self._lock:
            self._adapters[adapter.name] = adapter
            if self._model is not None:
                self._install_adapter_locked(adapter)

    def weight_version(self, adapter: str | None = None) -> int:
        if adapter is None:
            return self._version
        if adapter not in self._adapters:
            raise KeyError(f"hf backend: unknown adapter {adapter!r}")
        return self._adapters[adapter].version

    def _load_full_locked(self, weights: FullWeights) -> None:
        if self._has_adapters():
            raise RuntimeError("hf backend: full weight updates with LoRA adapters loaded")
        assert self._model is not None
        self._model.load_state_dict(dict(weights.state_dict), strict=True)
        self._version = weights.version

    def _install_adapter_locked(self, adapter: AdapterWeights) -> None:
        assert self._model is not None
        peft = self._peft
        config = peft.LoraConfig(**_lora_kwargs(adapter.config, peft.LoraConfig))
        with warnings.catch_warnings():
            # A LoRA on a head tied to the embeddings: peft warns for merging, never done here.
            warnings.filterwarnings("ignore", message=".*tie_word_embeddings=True.*")
            if not self._has_adapters():
                self._model = peft.get_peft_model(self._model, config, adapter_name=adapter.name)
            elif adapter.name not in self._model.peft_config:
                self._model.add_adapter(adapter.name, config)
        result = peft.set_peft_model_state_dict(
            self._model, dict(adapter.state_dict), adapter_name=adapter.name
        )
        unexpected = [key for key in result.unexpected_keys if "lora_" in key]
        if unexpected:
            raise ValueError(
                f"adapter {adapter.name!r}: tensors not in the model: {unexpected[:3]}"
            )
        self._model.eval()
        self._installed_adapter_versions[adapter.name] = adapter.version

    def _has_adapters(self) -> bool:
        return self._peft is not None and isinstance(self._model, self._peft.PeftModel)

    # ---- generation ----------------------------------------------------------------------

    def generate(
        self, requests: Sequence[GenerationRequest], should_stop: StopCheck | None = None
    ) -> list[Completion]:
        trajectories = [self._start(request) for request in requests]
        while True:
            active = [t for t in trajectories if t.reason is None]
            if not active:
                break
            if self._stopped(active, should_stop):
                break
            with self._lock:
                if self._model is None:
                    raise RuntimeError("hf backend: generate on an offloaded rank; call load()")
                for _, group in groupby(sorted(active, key=_group_key), key=_group_key):
                    self._generate_chunk(list(group))
        return [self._completion(t) for t in trajectories]

    def _start(self, request: GenerationRequest) -> _Trajectory:
        if request.adapter is not None and request.adapter not in self._adapters:
            known = ", ".join(sorted(self._adapters)) or "none"
            raise ValueError(
                f"request {request.request_id!r}: unknown adapter "
                f"{request.adapter!r}; loaded adapters: {known}"
            )
        prefix = list(request.prefix_token_ids)
        log_probs = list(request.prefix_log_probs) or [math.nan] * len(prefix)
        trajectory = _Trajectory(request, prefix, log_probs)
        if prefix and prefix[-1] in self._eos_ids:
            trajectory.reason = FinishReason.STOP
        elif trajectory.remaining <= 0:
            trajectory.reason = FinishReason.LENGTH
        return trajectory

    def _generate_chunk(self, group: list[_Trajectory]) -> None:
        assert self._model is not None
        model = self._model
        first = group[0].request
        rows = [list(t.request.prompt_token_ids) + t.token_ids for t in group]
        input_ids, attention_mask = _left_pad(rows, self._pad_id, self._device)
        num_new = min(self._chunk_tokens, max(t.remaining for t in group))
        kwargs = _sampling_kwargs(first.sampling)
        with torch.no_grad(), _adapter_context(model, first.adapter, self._has_adapters()):
            output = model.generate(  # type: ignore[operator]  # transformers types generate through a decorator
                input_ids=input_ids,
                attention_mask=attention_mask,
                max_new_tokens=num_new,
                pad_token_id=self._pad_id,
                eos_token_id=sorted(self._eos_ids),
                return_dict_in_generate=True,
                output_logits=True,
                **kwargs,
            )
        new_tokens = output.sequences[:, input_ids.shape[1] :].tolist()
        # Raw logits (before sampling processors), one [rows, vocab] tensor per new position.
        step_log_probs = [torch.log_softmax(step.float(), dim=-1) for step in output.logits]
        version = (
            self._installed_adapter_versions[first.adapter] if first.adapter else self._version
        )
        for row, trajectory in enumerate(group):
            self._append(trajectory, new_tokens[row], step_log_probs, row, version)

    def _append(
        self,
        trajectory: _Trajectory,
        tokens: list[int],
        step_log_probs: list[torch.Tensor],
        row: int,
        version: int,
    ) -> None:
        if trajectory.oldest_version is None or version < trajectory.oldest_version:
            trajectory.oldest_version = version
        for position, token in enumerate(tokens[: trajectory.remaining]):
            trajectory.token_ids.append(token)
            trajectory.log_probs.append(float(step_log_probs[position][row, token]))
            if token in self._eos_ids:
                trajectory.reason = FinishReason.STOP
                return
        if trajectory.remaining <= 0:
            trajectory.reason = FinishReason.LENGTH

    def _completion(self, trajectory: _Trajectory) -> Completion:
        request = trajectory.request
        version = trajectory.oldest_version
        if version is None:  # nothing generated in this call
            version = self.weight_version(request.adapter)
        assert trajectory.reason is not None
        return Completion(
            request_id=request.request_id,
            token_ids=tuple(trajectory.token_ids),
            log_probs=tuple(trajectory.log_probs),
            finish_reason=trajectory.reason,
            weight_version=version,
            adapter=request.adapter,
            num_prefix_tokens=len(request.prefix_token_ids),
        )


def _group_key(trajectory: _Trajectory) -> tuple[str, SamplingParams]:
    request = trajectory.request
    return (request.adapter or "", request.sampling)


def _left_pad(rows: list[list[int]], pad_id: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Left padding: decoder-only generation appends new tokens at the right edge of every row."""
    width = max(len(row) for row in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for index, row in enumerate(rows):
        input_ids[index, width - len(row) :] = torch.tensor(row, dtype=torch.long)
        attention_mask[index, width - len(row) :] = 1
    return input_ids.to(device), attention_mask.to(device)


def _sampling_kwargs(sampling: SamplingParams) -> dict[str, Any]:
    if sampling.temperature == 0.0:
        return {"do_sample": False}
    # Explicit top_k=0 / top_p=1.0: a model's generation_config may carry other defaults.
    return {
        "do_sample": True,
        "temperature": sampling.temperature,
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
    }


class _adapter_context:
    """Activate one adapter for a chunk, or disable all adapters for base-model requests."""

    def __init__(self, model: Any, adapter: str | None, has_adapters: bool) -> None:
        self._model = model
        self._adapter = adapter
        self._has_adapters = has_adapters
        self._disabled: Any = None

    def __enter__(self) -> None:
        if not self._has_adapters:
            return
        if self._adapter is None:
            self._disabled = self._model.disable_adapter()
            self._disabled.__enter__()
        else:
            self._model.set_adapter(self._adapter)

    def __exit__(self, *exc: object) -> None:
        if self._disabled is not None:
            self._disabled.__exit__(*exc)


def _lora_kwargs(config: Any, lora_config: Any) -> dict[str, Any]:
    """`lora_config` (peft's LoraConfig) keyword arguments from a config dict (as saved in
    adapter_config.json)."""
    allowed = set(lora_config.__dataclass_fields__)
    kwargs = {key: value for key, value in dict(config).items() if key in allowed}
    if isinstance(kwargs.get("target_modules"), list | tuple):
        kwargs["target_modules"] = list(kwargs["target_modules"])
    kwargs.pop("peft_type", None)
    kwargs.pop("task_type", None)
    kwargs["task_type"] = "CAUSAL_LM"
    return kwargs
