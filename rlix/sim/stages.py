"""Stage times of a pipeline step in the simulator, from the cost model (`rlix.sim.costs`).

One function maps a stage of `rlix.pipelines` to the cost model's formula, so the simulator's
step time is the sum of these plus rollout, and a test can check one pipeline alone against
it. Multi-LoRA training backpropagates through the frozen base, so it is charged the full
6·N·n of the base (an upper bound: no weight gradients for the base; stated, not measured).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from rlix.sim.cost_fields import CostFieldError
from rlix.sim.costs import CostModel
from rlix.sim.gpu_types import GPUS

#: ASSUMPTION: a LoRA adapter of rank 16 on the attention and MLP projections: 2 x 16 x
#: (d_in + d_out) parameters per adapted matrix, 7 matrices per layer, BF16.
LORA_RANK = 16


def stage_seconds(costs: CostModel, stage: str, num_tokens: int, num_gpus: int, prefetched: bool = False) -> float:
    """A stage on `num_gpus` (`prefetched`: an init whose weights are in host memory already)."""
    if stage == "init":
        return costs.init_seconds(num_gpus, prefetched)
    if stage in ("old_log_probs", "ref_log_probs", "values"):
        return costs.forward_seconds(num_tokens, num_gpus)
    if stage == "actor_train":
        return costs.train_seconds(num_tokens, num_gpus)
    if stage == "critic_train":
        return costs.critic_train_seconds(num_tokens, num_gpus)
    raise ValueError(f"unknown stage {stage!r}")


def lora_adapter_bytes(costs: CostModel) -> float:
    m = costs.model
    hidden, mlp = m.hidden_size, m.intermediate_size
    kv = m.num_kv_heads * m.head_dim
    per_layer = (hidden + hidden) * 2 + (hidden + kv) * 2 + (hidden + mlp) * 3
    return 2.0 * LORA_RANK * per_layer * m.num_layers


def publish_seconds(costs: CostModel, full_model: bool) -> float:
    """Pushing a new version to the active rollout ranks: the whole model, or one adapter
    (measured `publish_full_s` / `publish_adapter_s` when calibrated)."""
    measured = costs.publish_full_s if full_model else costs.publish_adapter_s
    if measured is not None:
        return measured
    return costs.weight_sync_seconds(None if full_model else lora_adapter_bytes(costs))


#: Bytes written per trainable parameter by a checkpoint: BF16 weights (2) and Adam's FP32
#: master copy and two moments (12), as mixed-precision training keeps them.
CHECKPOINT_BYTES_PER_PARAM = 14.0


def checkpoint_seconds(costs: CostModel, full_model: bool, has_critic: bool) -> float:
    """Writing a checkpoint to storage: the trained weights with their optimizer state (the
    actor, and the critic of a PPO pipeline; for multi-LoRA the adapters only); measured
    `checkpoint_full_s` / `checkpoint_adapter_s` when calibrated."""
    measured = costs.checkpoint_full_s if full_model else costs.checkpoint_adapter_s
    if measured is not None:
        return measured
    weight_bytes = costs.model.weight_bytes if full_model else lora_adapter_bytes(costs)
    num_bytes = weight_bytes / 2.0 * CHECKPOINT_BYTES_PER_PARAM * (2 if has_critic and full_model else 1)
    return num_bytes / costs.storage_bytes_per_s


class StartupPlace(NamedTuple):
    """How many pipelines start together with one (it included), and its place among them."""

    num_together: float
    order: float


def startup_places(pipelines: Mapping[str, Any]) -> dict[str, StartupPlace]:
    """Each pipeline's start-up place: how many pipelines a live run starts together with it
    (arriving at the same time, it included), and its place among them in scenario order.

    Each starts its driver actor, then its trainer and its ranks' worker processes one after
    another, sharing the cores: a measured start-up (launch, the trainer's init) may grow with
    the first number (CostModel.launch_per_pipeline_s, init_per_pipeline_s: fitted when the
    calibration runs started different numbers together). A live driver launches them one after
    another in that order (CostModel.launch_stagger_s)."""
    together: dict[float, list[str]] = {}
    for pid, pipeline in pipelines.items():
        together.setdefault(pipeline.arrival_s, []).append(pid)
    return {pid: StartupPlace(float(len(group)), float(place))
            for group in together.values() for place, pid in enumerate(group)}


def scenario_costs(scenario: Any) -> dict[str, CostModel]:
    """The cost model of each model size the scenario's pipelines use, on its GPU, with its
    `costs:`: what a simulation of it needs, checked. A GPU type without figures or a bad
    constant in `costs:` is a ScenarioError at its line."""
    gpu = scenario.topology_config.gpu
    if gpu not in GPUS:  # a label the executor never reads; the simulator needs its figures
        raise scenario.field_error(("topology", "gpu"), gpu,
                                   f"no cost figures for this GPU in the simulator (known: {', '.join(GPUS)})")
    try:
        by_model = {model: CostModel.for_model(model, gpu, scenario.costs)
                    for model in dict.fromkeys(p.model for p in scenario.pipelines)}
    except CostFieldError as exc:
        if exc.key not in scenario.costs:
            raise
        raise scenario.field_error(("costs", exc.key), scenario.costs[exc.key], str(exc)) from None
    for index, pipeline in enumerate(scenario.pipelines):  # else it fails when the pipeline starts
        tp = pipeline.clusters.actor_infer.tp
        try:
            by_model[pipeline.model].kv_capacity_tokens(tp)
        except ValueError as exc:
            memory = " with costs.hbm_capacity_bytes" if "hbm_capacity_bytes" in scenario.costs else ""
            raise scenario.field_error(("pipelines", index, "model"), pipeline.model,
                                       f"{exc}{memory}: its rollout needs a larger tp") from None
    return by_model


def pipeline_costs(scenario: Any) -> dict[str, CostModel]:
    """Each pipeline's cost model: its model size's (`scenario_costs`) at its start-up place
    (`startup_places`)."""
    by_model = scenario_costs(scenario)
    pipelines = {p.id: p for p in scenario.pipelines}
    places = startup_places(pipelines)
    return {
        pid: by_model[p.model].with_overrides({"startup_pipelines": places[pid].num_together,
                                               "startup_order": places[pid].order})
        for pid, p in pipelines.items()
    }
