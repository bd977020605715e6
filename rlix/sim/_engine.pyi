"""Types of the compiled rollout engines (rlix/sim/_engine.pyx); the model is in engine.py."""

from typing import Any

import numpy as np

from rlix.sim.costs import CostModel

REQUEUED: int
COMPLETED: int
STATUS_NAMES: tuple[str, str]
MAX_TRAJECTORIES: int

def set_min_compact(value: int) -> int: ...

class Engine:
    dp_rank: int
    t_ready: float
    b: int
    @property
    def running(self) -> list[tuple[int, int, float, int]]: ...
    def state(self) -> tuple[Any, ...]: ...

class RolloutGroup:
    costs: CostModel
    balance: bool
    migrate_on_expand: bool
    tp: int
    max_batch: int
    kv_capacity_tokens: int
    admit_limit_tokens: int
    now: float
    num_compactions: int
    def __init__(
        self,
        costs: CostModel,
        tp: int,
        max_batch: int,
        kv_capacity_tokens: int,
        kv_watermark: float = 0.01,
        balance: bool = True,
        migrate_on_expand: bool = True,
    ) -> None: ...
    @property
    def num_queued(self) -> int: ...
    @property
    def num_running(self) -> int: ...
    @property
    def num_indexed(self) -> int: ...
    @property
    def num_remaining(self) -> int: ...
    @property
    def engines(self) -> list[int]: ...
    @property
    def num_engines(self) -> int: ...
    def has_engine(self, dp_rank: int) -> bool: ...
    def engine(self, dp_rank: int) -> Engine: ...
    def running_by_rank(self) -> dict[int, int]: ...
    def submit(
        self, traj_ids: Any, prompt_tokens: Any, response_tokens: Any, batch_ids: Any
    ) -> None: ...
    def add_engine(self, dp_rank: int, t_ready: float) -> None: ...
    def close_engine(self, dp_rank: int) -> None: ...
    def remove_engine(self, dp_rank: int, t: float) -> int: ...
    def advance(self, t_limit: float, max_completions: int | None = None) -> tuple[float, str]: ...
    def done_batches(self) -> list[int]: ...
    def drain_attempts(self) -> list[tuple[int, int, float, float, int, int, str]]: ...
    def drain_attempt_columns(self) -> dict[str, np.ndarray] | None: ...
    def drain_busy(self, until: float | None = None) -> list[tuple[int, float, float]]: ...
    def copy(self, into: RolloutGroup | None = None) -> RolloutGroup: ...

ROW_DTYPES: dict[str, type]

class AttemptRows:
    size: int
    keep: bool
    num_requeued: int
    recomputed_tokens: int
    def __init__(self) -> None: ...
    def take_columns(self) -> dict[str, np.ndarray]: ...
    def append(
        self, adapter_codes: np.ndarray, publish_times: list[np.ndarray | None], **columns: Any
    ) -> None: ...
    def absorb(
        self,
        g: RolloutGroup,
        num_preempted: np.ndarray,
        completed: np.ndarray,
        adapter_codes: np.ndarray,
        publish_times: list[np.ndarray | None],
        completed_code: int,
        requeued_code: int,
        base: int = 0,
    ) -> list[int]: ...
