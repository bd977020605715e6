"""The simulator's cost model: how long decode iterations, prefills, training and weight moves take.

Every default cites where it comes from (`../shared/WORKLOADS.md` lists the published figures);
where no figure exists the comment says ASSUMPTION and why the value is what it is. A scenario
overrides any field by name (`CostModel.for_model("7b", overrides={"train_mfu": 0.45})`); an
unknown name or a bad value is a ValueError naming it.

Decode. One iteration decodes one token for each of the `b` running sequences holding `K` tokens
of KV cache in all: t(b, K) = alpha(b, tp) + beta(tp) * K, with

- alpha = per-step overhead + linear layers f_lin(b, tp) + TP all-reduces;
- beta  = KV bytes per token held on one GPU / HBM bandwidth (attention reads the whole cache).

f_lin comes from Vidur's H100 profile of Llama-2-7B linear layers (WORKLOADS.md): 5.6 ms flat
up to 64 tokens at TP1, floors of 3.2 and 1.3 ms at TP2 and TP8. The floor is fitted as
`launch + weights / (tp * effective bandwidth)`: TP1 and TP2 give 0.8 ms of launch cost for the
32 layers and 4.8 ms to read the 13.5 GB of weights (2.8 TB/s, 84% of HBM). That fit predicts
1.4 ms at TP8 (published 1.3) and, scaled to Llama-2-70B's 80 layers and 141 GB, 8.3 ms at TP8
(published 8.4), so the fit is used to scale the floor to other shapes and GPUs. Above the floor
the profile's excess (compute: 0.8 ms more at 128 tokens ... 77.6 ms at 4096) is scaled by
parameter count, by peak FLOP/s relative to the H100, and divided by tp (ASSUMPTION: linear-layer
compute scales with parameters; attention FLOPs are left out).

Everything else is FLOP counting (2·N·n forward, 6·N·n training, WORKLOADS.md) at a stated MFU,
or bytes over a stated bandwidth.

Measured constants. `rlix-sim calibrate` fits the fields of `rlix.sim.cost_fields.CALIBRATED`
from run folders (rlix.sim.calibrate); each one set replaces the formula it names (decode floor
and per-sequence term, prefill and stage times per token, weight moves, publish, checkpoint and
start-up times), so a scenario given a calibrated `costs:` runs on the measured machine, not on
the H100's datasheet. Unset (None), the formula above holds.
"""

from __future__ import annotations

import bisect
import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlix.scenarios.models import ModelShape
from rlix.sim.cost_fields import CostFieldError, check_field, model_by_name
from rlix.sim.gpu_types import GIB, GPUS

# Vidur's H100 profile of Llama-2-7B linear layers summed over layers, TP1, seconds by tokens in
# the iteration (WORKLOADS.md); flat below 64 tokens.
VIDUR_LLAMA2_7B_TP1_S: tuple[tuple[int, float], ...] = (
    (64, 5.6e-3),
    (128, 6.4e-3),
    (256, 9.2e-3),
    (512, 12.0e-3),
    (1024, 21.0e-3),
    (4096, 83.2e-3),
)
# The profiled model: Llama-2-7B has 6.74e9 parameters in 32 layers (its published config).
VIDUR_REF_PARAMS = 6.74e9
VIDUR_REF_LAYERS = 32
# Vidur's TP2 floor (WORKLOADS.md); with the TP1 floor it fixes launch cost and weight bandwidth.
VIDUR_FLOOR_TP2_S = 3.2e-3



@dataclass(frozen=True)
class CostModel:
    """Stage and decode times for one model shape on one GPU type (all times in seconds)."""

    model: ModelShape
    gpu_name: str
    hbm_capacity_bytes: float
    hbm_bytes_per_s: float
    peak_flops_per_s: float
    nvlink_bytes_per_s: float
    host_link_bytes_per_s: float
    # ASSUMPTION: per decode step scheduler, sampling and detokenisation cost outside the layers.
    decode_overhead_s: float = 1.0e-3
    # ASSUMPTION: NCCL all-reduce latency for a small message over NVLink; two per layer at TP > 1.
    allreduce_latency_s: float = 10e-6
    # vLLM's default gpu_memory_utilization: the share of HBM the engine may use.
    gpu_memory_utilization: float = 0.9
    # ASSUMPTION: prefill runs at 50% of peak; Vidur's 4096-token point implies 67% for the
    # linear layers alone, attention and sampling take the rest.
    prefill_mfu: float = 0.5
    # Training at a realistic 35-50% MFU (WORKLOADS.md): the middle, 40%.
    train_mfu: float = 0.4
    # ASSUMPTION: log-prob, reference and value passes (2·N·n) at the training MFU.
    forward_mfu: float = 0.4
    # ASSUMPTION: process start, NCCL groups, optimizer allocation before the first step.
    init_fixed_s: float = 60.0
    # ASSUMPTION: weights read from local NVMe or a network file system at 2 GB/s at init.
    storage_bytes_per_s: float = 2e9
    # ASSUMPTION: waking an inference engine (KV cache reallocated, CUDA graphs kept) besides
    # copying its weight shard over the host link.
    expand_fixed_s: float = 2.0
    # ASSUMPTION: putting an engine to sleep besides copying its weight shard to the host (a
    # multi-LoRA engine keeps its base there; a full-finetune one drops its weights).
    shrink_fixed_s: float = 1.0
    # RLix syncs a 30B model (60 GB in BF16) through CPU serialization in ~90 s (WORKLOADS.md):
    # 0.67 GB/s. Set it to NVLink's 450e9 to model an NCCL broadcast inside a node.
    weight_sync_bytes_per_s: float = 60e9 / 90.0
    # The linear-layer profile the decode model scales (see the module docstring).
    linear_profile_tp1_s: tuple[tuple[int, float], ...] = VIDUR_LLAMA2_7B_TP1_S
    linear_floor_tp2_s: float = VIDUR_FLOOR_TP2_S
    # -- measured (rlix-sim calibrate); None: the formula above. A decode iteration takes
    # decode_iteration_s + decode_per_sequence_s * b (no KV term: a fit cannot tell it from
    # the per-sequence term at the lengths measured); prefill prefill_per_token_s a token.
    decode_iteration_s: float | None = None
    decode_per_sequence_s: float | None = None
    prefill_per_token_s: float | None = None
    # A log-prob/reference/value pass and a training step (actor or critic): fixed + per token
    # of the batch, whatever the cluster's size (measured on the cluster as it ran).
    forward_fixed_s: float | None = None
    forward_per_token_s: float | None = None
    train_fixed_s: float | None = None
    train_per_token_s: float | None = None
    # Weight moves of a rollout rank. A live pipeline's init starts its ranks' worker
    # processes after its trainer, one after another, each taking worker_start_s (a
    # multi-LoRA pipeline's worker_start_multi_lora_s when measured: it loads the adapter
    # library too); the init ends when all are up.
    # The driver's own calls between an Expand (Shrink) and the rank's load (offload), on top.
    load_s: float | None = None
    worker_start_s: float | None = None
    worker_start_multi_lora_s: float | None = None
    offload_s: float | None = None
    expand_overhead_s: float | None = None
    shrink_overhead_s: float | None = None
    # Pushing a new version to the rollout ranks, and writing a checkpoint, per step.
    publish_full_s: float | None = None
    publish_adapter_s: float | None = None
    checkpoint_full_s: float | None = None
    checkpoint_adapter_s: float | None = None
    # Start-up, measured on a few cores where the pipelines starting together share them
    # (`startup_pipelines`, set by the simulator): from a pipeline's arrival to its first
    # request, launch_s + launch_per_pipeline_s * n (a live driver actor starting); the init
    # stage, init_s + init_per_pipeline_s * n (its trainer starting).
    init_s: float | None = None
    init_per_pipeline_s: float | None = None
    #: A pipeline that prefetches (rlix.pipelines.ops.Prefetch): from the start of its
    #: prefetch to its end, before it asks for its GPUs; its init_s is then what it held them.
    prefetch_s: float | None = None
    prefetch_per_pipeline_s: float | None = None
    launch_s: float | None = None
    launch_per_pipeline_s: float | None = None
    startup_pipelines: float = 0.0
    # The driver launches the pipelines arriving together one after another: the k-th
    # (`startup_order`, from 0, set by the simulator) launches k * launch_stagger_s later.
    launch_stagger_s: float | None = None
    startup_order: float = 0.0

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def for_model(
        cls,
        model: str | ModelShape = "7b",
        gpu: str = "h100",
        overrides: Mapping[str, Any] | None = None,
    ) -> CostModel:
        """Defaults for a size class of `rlix.scenarios.models.MODELS` on `gpu` ("h100", "a100")."""
        shape = model_by_name(model) if isinstance(model, str) else model
        if gpu not in GPUS:
            raise ValueError(f"unknown gpu {gpu!r} (known: {', '.join(GPUS)})")
        g = GPUS[gpu]
        base = cls(
            model=shape,
            gpu_name=g.name,
            hbm_capacity_bytes=g.hbm_capacity_bytes,
            hbm_bytes_per_s=g.hbm_bytes_per_s,
            peak_flops_per_s=g.peak_flops_per_s,
            nvlink_bytes_per_s=g.nvlink_bytes_per_s,
            host_link_bytes_per_s=g.host_link_bytes_per_s,
        )
        return base.with_overrides(overrides or {})

    def with_overrides(self, overrides: Mapping[str, Any]) -> CostModel:
        """A copy with the named fields replaced; ValueError names an unknown field or bad value."""
        fields = {f.name for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for key, value in overrides.items():
            if key not in fields:
                close = difflib.get_close_matches(key, fields, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise CostFieldError(key, f"unknown cost field {key!r}{hint} (known: {', '.join(sorted(fields))})")
            try:
                changes[key] = check_field(key, value)
            except ValueError as exc:
                raise CostFieldError(key, str(exc)) from None
        if not changes:
            return self
        result = dataclasses.replace(self, **changes)
        floor_tp1 = result.linear_profile_tp1_s[0][1]
        if not floor_tp1 / 2 <= result.linear_floor_tp2_s < floor_tp1:
            raise CostFieldError(
                "linear_floor_tp2_s",
                f"cost field 'linear_floor_tp2_s' must lie in [half, all) of the TP1 floor {floor_tp1!r}, "
                f"got {result.linear_floor_tp2_s!r}"
            )
        return result

    # -- decode ------------------------------------------------------------------------------

    def _linear_floor_parts(self) -> tuple[float, float]:
        """(launch seconds per layer, effective weight-read bandwidth as a share of HBM), fitted
        on the profile's TP1 and TP2 floors: floor(tp) = launch + weights / tp."""
        floor_tp1 = self.linear_profile_tp1_s[0][1]
        weight_read_s = 2.0 * (floor_tp1 - self.linear_floor_tp2_s)
        launch_s = floor_tp1 - weight_read_s
        # The profile was taken on an H100 (3.35 TB/s, WORKLOADS.md); BF16 weights.
        efficiency = (2.0 * VIDUR_REF_PARAMS / weight_read_s) / 3.35e12
        return launch_s / VIDUR_REF_LAYERS, efficiency

    def linear_seconds(self, num_tokens: int, tp: int) -> float:
        """Linear layers of one forward pass over `num_tokens` tokens on one GPU of a TP group."""
        launch_per_layer_s, efficiency = self._linear_floor_parts()
        floor = self.model.num_layers * launch_per_layer_s + self.model.weight_bytes / (
            tp * efficiency * self.hbm_bytes_per_s
        )
        scale = (self.model.num_params / VIDUR_REF_PARAMS) * (989e12 / self.peak_flops_per_s)
        return floor + scale * _profile_excess(self.linear_profile_tp1_s, num_tokens) / tp

    def allreduce_seconds(self, num_tokens: int, tp: int) -> float:
        """Two ring all-reduces of the BF16 hidden states per layer (attention and MLP outputs)."""
        if tp <= 1:
            return 0.0
        message_bytes = num_tokens * self.model.hidden_size * 2
        one = (
            self.allreduce_latency_s + 2.0 * (tp - 1) / tp * message_bytes / self.nvlink_bytes_per_s
        )
        return 2 * self.model.num_layers * one

    def kv_bytes_per_token_per_gpu(self, tp: int) -> float:
        """KV heads split across the TP group; past the number of KV heads they are replicated."""
        return self.model.kv_bytes_per_token / min(tp, self.model.num_kv_heads)

    def decode_coefficients(self, batch_size: int, tp: int) -> tuple[float, float]:
        """(alpha_s, beta_s_per_token) with t(b, K) = alpha + beta * K for one decode iteration."""
        if self.decode_iteration_s is not None:
            return self.decode_iteration_s + (self.decode_per_sequence_s or 0.0) * batch_size, 0.0
        alpha = (
            self.decode_overhead_s
            + self.linear_seconds(batch_size, tp)
            + self.allreduce_seconds(batch_size, tp)
        )
        beta = self.kv_bytes_per_token_per_gpu(tp) / self.hbm_bytes_per_s
        return alpha, beta

    def decode_iteration_seconds(self, batch_size: int, kv_tokens: int, tp: int) -> float:
        alpha, beta = self.decode_coefficients(batch_size, tp)
        return alpha + beta * kv_tokens

    # -- prefill -----------------------------------------------------------------------------

    def prefill_compute_seconds(self, num_tokens: int, tp: int) -> float:
        """2·N·n FLOPs at `prefill_mfu`: what admitting `num_tokens` adds to a decode step that
        runs anyway (vLLM batches prefills into decode steps; the weight read is paid once)."""
        if self.prefill_per_token_s is not None:
            return self.prefill_per_token_s * num_tokens
        return (
            2.0
            * self.model.num_params
            * num_tokens
            / (tp * self.peak_flops_per_s * self.prefill_mfu)
        )

    def prefill_seconds(self, num_tokens: int, tp: int) -> float:
        """A prefill on its own: one forward pass's floor plus the compute."""
        return self.decode_coefficients(0, tp)[0] + self.prefill_compute_seconds(num_tokens, tp)

    # -- training and other gang stages ------------------------------------------------------

    def train_seconds(self, num_tokens: int, num_gpus: int) -> float:
        """Actor training: 6·N·n FLOPs at `train_mfu` over `num_gpus` GPUs."""
        if self.train_fixed_s is not None or self.train_per_token_s is not None:
            return self._measured(self.train_fixed_s, self.train_per_token_s, num_tokens)
        return (
            6.0
            * self.model.num_params
            * num_tokens
            / (num_gpus * self.peak_flops_per_s * self.train_mfu)
        )

    def forward_seconds(
        self, num_tokens: int, num_gpus: int, model: ModelShape | None = None
    ) -> float:
        """A log-prob, reference or value pass: 2·N·n FLOPs at `forward_mfu`."""
        if self.forward_fixed_s is not None or self.forward_per_token_s is not None:
            return self._measured(self.forward_fixed_s, self.forward_per_token_s, num_tokens)
        params = (model or self.model).num_params
        return 2.0 * params * num_tokens / (num_gpus * self.peak_flops_per_s * self.forward_mfu)

    def critic_train_seconds(
        self, num_tokens: int, num_gpus: int, critic: ModelShape | None = None
    ) -> float:
        """Critic training: 6·N_critic·n at `train_mfu` (the critic defaults to the actor's shape)."""
        if self.train_fixed_s is not None or self.train_per_token_s is not None:
            return self._measured(self.train_fixed_s, self.train_per_token_s, num_tokens)
        params = (critic or self.model).num_params
        return 6.0 * params * num_tokens / (num_gpus * self.peak_flops_per_s * self.train_mfu)

    @staticmethod
    def _measured(fixed_s: float | None, per_token_s: float | None, num_tokens: int) -> float:
        return (fixed_s or 0.0) + (per_token_s or 0.0) * num_tokens

    def launch_seconds(self) -> float:
        """From a pipeline's arrival (registered and admitted) to its first request."""
        return ((self.launch_s or 0.0) + (self.launch_per_pipeline_s or 0.0) * self.startup_pipelines
                + (self.launch_stagger_s or 0.0) * self.startup_order)

    def init_seconds(self, num_gpus: int = 1, prefetched: bool = False) -> float:
        """A training cluster's init on `num_gpus`, holding them: a fixed start-up plus reading
        the weights from storage, or, `prefetched` into host memory before (`prefetch_seconds`),
        copying each GPU's shard over its host link. Measured: init_s plus init_per_pipeline_s
        for each pipeline started with it, plus the measured prefetch when not prefetched (a
        live pipeline that does not prefetch does the same work inside its init)."""
        if self.init_s is not None or self.init_per_pipeline_s is not None:
            held_s = (self.init_s or 0.0) + (self.init_per_pipeline_s or 0.0) * self.startup_pipelines
            return held_s if prefetched or not self._prefetch_measured else held_s + self.prefetch_seconds()
        if prefetched:
            return self.init_fixed_s + self.model.weight_bytes / max(1, num_gpus) / self.host_link_bytes_per_s
        return self.init_fixed_s + self.prefetch_seconds()

    def prefetch_seconds(self) -> float:
        """Reading a model's weights from storage into host memory, holding no GPU (measured:
        prefetch_s, a live trainer process starting and loading its model on the host)."""
        if self._prefetch_measured:
            return (self.prefetch_s or 0.0) + (self.prefetch_per_pipeline_s or 0.0) * self.startup_pipelines
        return self.model.weight_bytes / self.storage_bytes_per_s

    @property
    def _prefetch_measured(self) -> bool:
        return self.prefetch_s is not None or self.prefetch_per_pipeline_s is not None

    def worker_start_seconds(self, multi_lora: bool) -> float:
        """Starting one rollout rank's worker process (measured; 0 unmeasured: the init then
        ends with the trainer's load, as the cost model has it for real clusters)."""
        if multi_lora and self.worker_start_multi_lora_s is not None:
            return self.worker_start_multi_lora_s
        return self.worker_start_s or 0.0

    # -- weights on and off rollout ranks ----------------------------------------------------

    def weight_load_seconds(self, tp: int) -> float:
        """Expanding a rollout rank: each GPU copies its weight shard host -> GPU."""
        if self.load_s is not None:
            return self.load_s
        return self.expand_fixed_s + self.model.weight_bytes / tp / self.host_link_bytes_per_s

    def offload_seconds(self, tp: int, keeps_weights: bool = True) -> float:
        """Shrinking a rollout rank. With `keeps_weights` (vLLM's sleep level 1, as a multi-LoRA
        pipeline's engines sleep: the base never changes) each GPU copies its weight shard
        GPU -> host; without (level 2, as a full-finetune pipeline's engines sleep: the next wake
        loads the newest version anyway) the weights are dropped and only the fixed part is paid."""
        if self.offload_s is not None:
            return self.offload_s
        if not keeps_weights:
            return self.shrink_fixed_s
        return self.shrink_fixed_s + self.model.weight_bytes / tp / self.host_link_bytes_per_s

    def weight_sync_seconds(self, num_bytes: float | None = None) -> float:
        """Pushing a new weight version (the whole model unless `num_bytes`, e.g. a LoRA adapter)."""
        return (
            self.model.weight_bytes if num_bytes is None else num_bytes
        ) / self.weight_sync_bytes_per_s

    def kv_capacity_tokens(self, tp: int) -> int:
        """Tokens of KV cache one rollout rank holds: its usable HBM less its weight shard."""
        free_per_gpu = (
            self.hbm_capacity_bytes * self.gpu_memory_utilization - self.model.weight_bytes / tp
        )
        if free_per_gpu <= 0:
            raise ValueError(
                f"model {self.model.name} does not fit at tp={tp} on {self.gpu_name} "
                f"(weight shard {self.model.weight_bytes / tp / GIB:.1f} GiB)"
            )
        return int(free_per_gpu // self.kv_bytes_per_token_per_gpu(tp))


def _profile_excess(profile: tuple[tuple[int, float], ...], num_tokens: int) -> float:
    """Profile time above its flat floor at `num_tokens`, linear between points and past the last."""
    floor = profile[0][1]
    if num_tokens <= profile[0][0]:
        return 0.0
    xs = [p[0] for p in profile]
    i = min(bisect.bisect_left(xs, num_tokens), len(profile) - 1)
    (x0, y0), (x1, y1) = profile[i - 1], profile[i]
    return y0 + (y1 - y0) * (num_tokens - x0) / (x1 - x0) - floor
