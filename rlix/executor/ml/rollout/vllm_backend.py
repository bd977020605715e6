"""The `vllm` rollout backend, written against vLLM's documented offline API; imported lazily.

Nothing here imports vLLM at module import time: `vllm` is imported when the engine is built,
so this module loads (and its tests skip cleanly) on machines without vLLM or CUDA.

vLLM APIs used (checked against vLLM 0.32's `vllm/entrypoints/llm.py`, `vllm/lora/request.py`,
`vllm/v1/worker/gpu_model_runner.py` and docs.vllm.ai "Sleep Mode", "LoRA Adapters"):
- `LLM(model, enable_sleep_mode=True, enable_lora=True, max_lora_rank, max_loras,
  enable_prefix_caching=True, ...)`; sleep mode is requested only when CUDA is available
  (the CPU worker's sleep/wake_up are no-ops that log a warning).
- Offload: `LLM.sleep(level=1)` (weights to host memory, KV cache dropped) for multi-LoRA,
  where the base never changes; `level=2` (weights dropped too) for full finetune, where the
  next load brings new weights anyway. Load: `LLM.wake_up(tags=["weights"])`, then the weight
  reload, then `LLM.wake_up(tags=["kv_cache"])`, so the reload never competes with the cache.
- Full weights in place: the payload is written as a safetensors folder and reloaded with
  `LLM.collective_rpc("reload_weights", kwargs={"weights_path": folder,
  "is_checkpoint_format": True})` (the worker's in-place reload), then
  `LLM.reset_prefix_cache()` so no KV computed with the old weights is reused. The NCCL/IPC
  weight-transfer engine (`init_weight_transfer_engine` / `update_weights`) is the faster path
  for large models across GPUs; the folder route works everywhere vLLM runs.
- Adapters: each version is written as a peft adapter folder and registered with
  `LLMEngine.add_lora(LoRARequest(name, int_id, path, load_inplace=True))`; `load_inplace`
  replaces the adapter with the same id without touching the base or other adapters.
  Requests then name it with `lora_request=LoRARequest(name, int_id, path)`.
- Generation: `LLM.generate([{"prompt_token_ids": ...}], [SamplingParams(max_tokens=chunk,
  logprobs=0, temperature, top_p, top_k)], lora_request=[...], use_tqdm=False)`; logprobs=0
  returns the sampled token's log-prob, raw (before temperature and truncation) by default.

Generation runs in chunks of `chunk_tokens` like the hf backend: each chunk resubmits prompt +
tokens so far (prefix caching makes that re-prefill nearly free), and the interrupt flag is
checked between chunks. A rank interrupted for a shrink returns partial prefixes within a chunk.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from tempfile import mkdtemp
from typing import Any

import torch

from rlix.executor.ml.rollout.base import (
    AdapterWeights,
    Completion,
    FinishReason,
    FullWeights,
    GenerationRequest,
    RolloutBackend,
    StopCheck,
)

# Sleep levels (vLLM's numbering).
KEEP_WEIGHTS_ON_HOST = 1
DROP_WEIGHTS = 2


# LoRA targets vLLM refuses to load ("... is unsupported LoRA weight").
UNSERVED_LORA_TARGETS = frozenset({"lm_head", "embed_tokens"})


class VllmBackend(RolloutBackend):
    """One vLLM engine per rollout rank; starts offloaded (the engine is built on first load)."""

    def __init__(
        self,
        model_path: str | Path,
        chunk_tokens: int = 64,
        enable_lora: bool = False,
        max_lora_rank: int = 16,
        max_loras: int = 4,
        workdir: str | Path | None = None,
        sleep_level: int | None = None,
        **engine_kwargs: Any,
    ) -> None:
        super().__init__()
        if chunk_tokens < 1:
            raise ValueError(f"vllm backend: chunk_tokens must be >= 1, got {chunk_tokens}")
        self._path = str(model_path)
        self._chunk_tokens = chunk_tokens
        self._enable_lora = enable_lora
        self._max_lora_rank = max_lora_rank
        self._max_loras = max_loras
        self._engine_kwargs = engine_kwargs
        self._workdir = Path(workdir) if workdir is not None else Path(mkdtemp(prefix="rlix-vllm-"))
        self._sleep_level = sleep_level or (KEEP_WEIGHTS_ON_HOST if enable_lora else DROP_WEIGHTS)
        self._llm: Any = None
        self._asleep = False  # engine built, then put to sleep by offload()
        self._lock = threading.Lock()
        self._version = 0
        self._weights_folder: Path | None = None  # newest full weights written, if any
        self._pending_weights: FullWeights | None = None
        self._adapters: dict[str, AdapterWeights] = {}
        self._adapter_ids: dict[str, int] = {}
        self._adapter_paths: dict[str, Path] = {}
        self._eos_ids: set[int] = set()

    # ---- engine life cycle ---------------------------------------------------------------

    @property
    def is_loaded(self) -> bool:
        return self._llm is not None and not self._asleep

    def _build_engine(self) -> None:
        from vllm import LLM  # lazy: vLLM is optional and GPU-oriented

        options: dict[str, Any] = {"enable_prefix_caching": True, **self._engine_kwargs}
        if torch.cuda.is_available():
            options.setdefault("enable_sleep_mode", True)
        if self._enable_lora:
            options.update(
                enable_lora=True, max_lora_rank=self._max_lora_rank, max_loras=self._max_loras
            )
        self._llm = LLM(model=self._path, **options)
        generation_config = self._llm.llm_engine.model_config.hf_config
        eos = getattr(generation_config, "eos_token_id", None)
        self._eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
        tokenizer_eos = self._llm.get_tokenizer().eos_token_id
        if tokenizer_eos is not None:
            self._eos_ids.add(int(tokenizer_eos))

    def load(self, weights: FullWeights | None = None) -> None:
        with self._lock:
            if weights is not None:
                self._pending_weights = weights
            if self._llm is None:
                self._build_engine()  # a fresh engine holds the folder's weights and its cache
            elif self._asleep:
                self._llm.wake_up(tags=["weights"])
                if self._pending_weights is None and self._sleep_level == DROP_WEIGHTS:
                    # Level 2 dropped the weights: restore the newest ones (or the folder's).
                    self._reload_locked(self._weights_folder or Path(self._path))
            if self._pending_weights is not None:
                self._write_and_reload_locked(self._pending_weights)
                self._pending_weights = None
            if self._asleep:
                self._llm.wake_up(tags=["kv_cache"])
                self._asleep = False
            for adapter in self._adapters.values():
                self._register_adapter_locked(adapter)
        self.clear_interrupt()

    def offload(self) -> None:
        with self._lock:
            if self._llm is None or self._asleep:
                return
            self._llm.sleep(level=self._sleep_level)
            self._asleep = True

    def shutdown(self) -> None:
        """Drop the engine and the weight folders this backend wrote."""
        with self._lock:
            self._llm = None
            self._asleep = False
            shutil.rmtree(self._workdir, ignore_errors=True)

    # ---- weights -------------------------------------------------------------------------

    def update_weights(self, weights: FullWeights) -> None:
        with self._lock:
            if not self.is_loaded:
                raise RuntimeError("vllm backend: update_weights on an offloaded rank; use load()")
            self._write_and_reload_locked(weights)

    def _write_and_reload_locked(self, weights: FullWeights) -> None:
        from safetensors.torch import save_file

        folder = self._workdir / f"weights-v{weights.version}"
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {name: t.detach().contiguous() for name, t in weights.state_dict.items()}
        save_file(tensors, str(folder / "model.safetensors"))
        self._reload_locked(folder)
        previous, self._weights_folder = self._weights_folder, folder
        self._version = weights.version
        if previous is not None and previous != folder:
            shutil.rmtree(previous, ignore_errors=True)

    def _reload_locked(self, folder: Path) -> None:
        self._llm.collective_rpc(
            "reload_weights", kwargs={"weights_path": str(folder), "is_checkpoint_format": True}
        )
        self._llm.reset_prefix_cache()

    def update_adapter(self, adapter: AdapterWeights) -> None:
        if not self._enable_lora:
            raise RuntimeError("vllm backend: built without enable_lora=True")
        targets = set(adapter.config.get("target_modules") or ())
        if targets & UNSERVED_LORA_TARGETS:
            # vLLM rejects these at load time deep in its engine; say so here, with the fix.
            raise ValueError(
                f"adapter {adapter.name!r}: vLLM does not serve LoRA on "
                f"{sorted(targets & UNSERVED_LORA_TARGETS)}; train it with target_modules "
                "without them (rlix.executor.ml.lora.ATTENTION_MODULES)"
            )
        with self._lock:
            self._adapters[adapter.name] = adapter
            self._write_adapter(adapter)
            if self.is_loaded:
                self._register_adapter_locked(adapter)

    def _write_adapter(self, adapter: AdapterWeights) -> None:
        from safetensors.torch import save_file

        folder = self._workdir / "adapters" / f"{adapter.name}-v{adapter.version}"
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {name: t.detach().contiguous() for name, t in adapter.state_dict.items()}
        save_file(tensors, str(folder / "adapter_model.safetensors"))
        (folder / "adapter_config.json").write_text(json.dumps(dict(adapter.config)))
        previous = self._adapter_paths.get(adapter.name)
        self._adapter_paths[adapter.name] = folder
        if previous is not None and previous != folder:
            shutil.rmtree(previous, ignore_errors=True)
        self._adapter_ids.setdefault(adapter.name, len(self._adapter_ids) + 1)

    def _lora_request(self, name: str, load_inplace: bool = False) -> Any:
        from vllm.lora.request import LoRARequest

        return LoRARequest(
            name, self._adapter_ids[name], str(self._adapter_paths[name]), load_inplace=load_inplace
        )

    def _register_adapter_locked(self, adapter: AdapterWeights) -> None:
        self._llm.llm_engine.add_lora(self._lora_request(adapter.name, load_inplace=True))

    def weight_version(self, adapter: str | None = None) -> int:
        if adapter is None:
            return self._version
        if adapter not in self._adapters:
            raise KeyError(f"vllm backend: unknown adapter {adapter!r}")
        return self._adapters[adapter].version

    # ---- generation ----------------------------------------------------------------------

    def generate(
        self, requests: Sequence[GenerationRequest], should_stop: StopCheck | None = None
    ) -> list[Completion]:
        for request in requests:
            if request.adapter is not None and request.adapter not in self._adapters:
                known = ", ".join(sorted(self._adapters)) or "none"
                raise ValueError(
                    f"request {request.request_id!r}: unknown adapter "
                    f"{request.adapter!r}; loaded adapters: {known}"
                )
        states = [_State.start(r, self._eos_ids) for r in requests]
        while True:
            active = [s for s in states if s.reason is None]
            if not active:
                break
            if self._stopped(active, should_stop):
                break
            with self._lock:
                if not self.is_loaded:
                    raise RuntimeError("vllm backend: generate on an offloaded rank; call load()")
                self._generate_chunk_locked(active)
        return [s.completion(self.weight_version(s.request.adapter)) for s in states]

    def _generate_chunk_locked(self, active: list[_State]) -> None:
        from vllm import SamplingParams as VllmSamplingParams

        prompts = [
            {"prompt_token_ids": list(s.request.prompt_token_ids) + s.token_ids} for s in active
        ]
        params = [
            VllmSamplingParams(
                temperature=s.request.sampling.temperature,
                top_p=s.request.sampling.top_p,
                top_k=s.request.sampling.top_k,
                max_tokens=min(self._chunk_tokens, s.remaining),
                logprobs=0,
                # We detect end-of-sequence ourselves; keep it in the output token ids.
                skip_special_tokens=False,
            )
            for s in active
        ]
        lora = [
            self._lora_request(s.request.adapter) if s.request.adapter else None for s in active
        ]
        outputs = self._llm.generate(
            prompts, params, lora_request=lora if self._enable_lora else None, use_tqdm=False
        )
        for state, output in zip(active, outputs, strict=True):
            sample = output.outputs[0]
            log_probs = [
                entry[token].logprob
                for token, entry in zip(sample.token_ids, sample.logprobs, strict=True)
            ]
            version = self.weight_version(state.request.adapter)
            state.append(list(sample.token_ids), log_probs, version, sample.finish_reason == "stop")


class _State:
    """One trajectory across chunks (the vLLM twin of the hf backend's _Trajectory)."""

    def __init__(self, request: GenerationRequest, eos_ids: set[int]) -> None:
        self.request = request
        self.token_ids = list(request.prefix_token_ids)
        self.log_probs = list(request.prefix_log_probs) or [float("nan")] * len(self.token_ids)
        self.eos_ids = eos_ids
        self.reason: FinishReason | None = None
        self.oldest_version: int | None = None

    @classmethod
    def start(cls, request: GenerationRequest, eos_ids: set[int]) -> _State:
        state = cls(request, eos_ids)
        if state.token_ids and state.token_ids[-1] in eos_ids:
            state.reason = FinishReason.STOP
        elif state.remaining <= 0:
            state.reason = FinishReason.LENGTH
        return state

    @property
    def remaining(self) -> int:
        return self.request.max_new_tokens - len(self.token_ids)

    def append(
        self, tokens: list[int], log_probs: list[float], version: int, stopped: bool
    ) -> None:
        if self.oldest_version is None or version < self.oldest_version:
            self.oldest_version = version
        self.token_ids.extend(tokens)
        self.log_probs.extend(log_probs)
        if stopped or (tokens and tokens[-1] in self.eos_ids):
            self.reason = FinishReason.STOP
        elif self.remaining <= 0:
            self.reason = FinishReason.LENGTH

    def completion(self, current_version: int) -> Completion:
        assert self.reason is not None
        return Completion(
            request_id=self.request.request_id,
            token_ids=tuple(self.token_ids),
            log_probs=tuple(self.log_probs),
            finish_reason=self.reason,
            weight_version=self.oldest_version
            if self.oldest_version is not None
            else current_version,
            adapter=self.request.adapter,
            num_prefix_tokens=len(self.request.prefix_token_ids),
        )
