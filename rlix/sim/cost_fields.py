"""The names and checks of the cost model's fields (rlix.sim.costs.CostModel): which are the
measured constants `rlix-sim calibrate` fits, which may be 0, which are fractions, and the
check each override passes (a ValueError naming the field and the value)."""

from __future__ import annotations

import math
from typing import Any

from rlix.scenarios.models import MODELS, ModelShape

#: The measured constants `rlix-sim calibrate` fits (seconds; None: the formula holds). What
#: each replaces is in `CostModel`'s comments; rlix.scenarios.costs documents them for users.
CALIBRATED = (
    "decode_iteration_s", "decode_per_sequence_s", "prefill_per_token_s",
    "forward_fixed_s", "forward_per_token_s", "train_fixed_s", "train_per_token_s",
    "load_s", "offload_s", "expand_overhead_s", "shrink_overhead_s", "worker_start_s",
    "worker_start_multi_lora_s",
    "publish_full_s", "publish_adapter_s", "checkpoint_full_s", "checkpoint_adapter_s",
    "init_s", "init_per_pipeline_s", "prefetch_s", "prefetch_per_pipeline_s",
    "launch_s", "launch_per_pipeline_s", "launch_stagger_s",
)
#: Overrides under which no move costs time: a rank's weight load and offload, the engine's
#: wake and sleep (in those), and the prefill of a re-queued trajectory's prefix. What a policy
#: leaves on the table with them is not the price of its moves (bench/packing.py --free-moves).
FREE_MOVES = {"load_s": 0.0, "offload_s": 0.0, "expand_overhead_s": 0.0, "shrink_overhead_s": 0.0,
              "prefill_per_token_s": 0.0}
_NUMERIC_MIN_ZERO = {
    *CALIBRATED,
    "startup_pipelines",
    "startup_order",
    "decode_overhead_s",
    "allreduce_latency_s",
    "init_fixed_s",
    "expand_fixed_s",
    "shrink_fixed_s",
}
_FRACTIONS = {"gpu_memory_utilization", "prefill_mfu", "train_mfu", "forward_mfu"}


class CostFieldError(ValueError):
    """A cost override is unknown or out of range; `key` names the field."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(key, problem)  # the constructor's args: copies and pickles are whole
        self.key = key
        self.problem = problem

    def __str__(self) -> str:
        return self.problem


def model_by_name(name: str) -> ModelShape:
    if name not in MODELS:
        raise ValueError(f"unknown model size {name!r} (known: {', '.join(MODELS)})")
    return MODELS[name]


def check_field(key: str, value: Any) -> Any:
    if key == "model":
        if isinstance(value, ModelShape):
            return value
        if isinstance(value, str):
            return model_by_name(value)
        raise ValueError(f"cost field 'model' must be a size name, got {value!r}")
    if key == "gpu_name":
        if not isinstance(value, str):
            raise ValueError(f"cost field 'gpu_name' must be a string, got {value!r}")
        return value
    if key == "linear_profile_tp1_s":
        return _checked_profile(value)
    if key in CALIBRATED and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"cost field {key!r} must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and key not in _NUMERIC_MIN_ZERO):
        raise ValueError(f"cost field {key!r} must be positive, got {value!r}")
    if key in _FRACTIONS and value > 1:
        raise ValueError(f"cost field {key!r} is a fraction in (0, 1], got {value!r}")
    return float(value)


def _checked_profile(value: Any) -> tuple[tuple[int, float], ...]:
    try:
        points = tuple((int(n), float(s)) for n, s in value)
    except (TypeError, ValueError):
        raise ValueError(
            f"cost field 'linear_profile_tp1_s' must be [tokens, seconds] pairs, got {value!r}"
        ) from None
    ok = len(points) >= 2 and all(
        a[0] < b[0] and a[1] <= b[1] and a[1] > 0 for a, b in zip(points, points[1:], strict=False)
    )
    if not ok:
        raise ValueError(
            "cost field 'linear_profile_tp1_s' needs >= 2 points, tokens increasing, seconds positive "
            f"and non-decreasing; got {value!r}"
        )
    return points
