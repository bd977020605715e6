"""The scenario's sections other than pipelines: topology, policy, trace, engine, faults, executor.

Every model is strict (no silent type coercion: ``tp: "2"`` and ``kl: 1`` are errors), frozen,
and forbids unknown fields. Field docstrings are the documentation of the YAML format.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from rlix.policy import POLICIES, PolicyConfig, Topology
from rlix.scenarios.errors import NO_VALUE, FieldProblem
from rlix.scenarios.gpusets import MAX_POOL_GPUS, GpuSet

if TYPE_CHECKING:
    import pandas as pd

#: Names (pipeline ids, adapters, scenarios) end up in file names and table cells.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"

#: The latest time an arrival or a fault may be given at, in seconds (about 317 years).
MAX_TIME_S = 1e10

#: The most train steps a pipeline or adapter may ask for: far past any RL run, and short of a
#: count the simulator would spin on for ever (10**22 steps ran until killed).
MAX_STEPS = 10**6

#: The most trajectories one train step may ask for (prompts x samples): cluster-scale batches
#: are thousands; 10**12 prompts ended in an out-of-memory error naming no field.
MAX_TRAJECTORIES_PER_STEP = 2**24


class Section(BaseModel):
    """Base of every scenario model: strict, frozen, unknown fields are errors."""

    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, use_attribute_docstrings=True
    )


class TopologyConfig(Section):
    """The GPU pool: `num_nodes` nodes of `gpus_per_node` GPUs; GPU g is on node g // gpus_per_node."""

    num_nodes: int = Field(gt=0)
    """Number of nodes."""
    gpus_per_node: int = Field(gt=0)
    """GPUs per node (a TP bundle never spans nodes)."""
    gpu: str = Field("h100", pattern=NAME_PATTERN)
    """GPU type, for the simulator's cost model (which validates it)."""

    @model_validator(mode="after")
    def _bounded(self) -> TopologyConfig:
        if self.num_gpus > MAX_POOL_GPUS:
            raise FieldProblem(
                (), {"num_nodes": self.num_nodes, "gpus_per_node": self.gpus_per_node},
                f"a pool of {self.num_gpus} GPUs; at most {MAX_POOL_GPUS}",
            )
        return self

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    def spec(self) -> Topology:
        return Topology(self.num_nodes, self.gpus_per_node)


_POLICY_DEFAULTS = PolicyConfig()


class PolicyTunables(Section):
    """`rlix.policy.PolicyConfig`'s fields, each optional (its default is the policy's)."""

    retry_backoff_s: float = Field(_POLICY_DEFAULTS.retry_backoff_s, ge=0, allow_inf_nan=False)
    """After a failed decision, the same rank or request is not retried before this long."""
    rebalance_margin_bundles: float = Field(
        _POLICY_DEFAULTS.rebalance_margin_bundles, ge=0, allow_inf_nan=False
    )
    """Extra stickiness, in bundles, before an active rank is moved to another pipeline."""
    min_rebalance_interval_s: float = Field(
        _POLICY_DEFAULTS.min_rebalance_interval_s, ge=0, allow_inf_nan=False
    )
    """No reversal of a rebalance within this long (see rlix.policy.PolicyConfig; rlix only)."""
    keep_busy_tail: bool = _POLICY_DEFAULTS.keep_busy_tail
    """A pipeline in its tail keeps its busy ranks and gives its idle ones (rlix only)."""
    home_floor: bool = _POLICY_DEFAULTS.home_floor
    """A rolling pipeline's share is at least the GPUs of its home it can use (rlix only)."""
    job_order: Literal["arrival", "shortest"] = _POLICY_DEFAULTS.job_order  # type: ignore[assignment]
    """Which waiting job starts first: arrival, or shortest runtime estimate, aged (rlix only)."""
    max_home_load: float = Field(_POLICY_DEFAULTS.max_home_load, ge=0, allow_inf_nan=False)
    """Homes of running jobs cover at most this many times the pool; 0: no limit (rlix only)."""
    look_ahead: bool = _POLICY_DEFAULTS.look_ahead
    """Loans of an away pipeline's home pay for their moves and are handed back on time (rlix only)."""
    loan_payback: float = Field(_POLICY_DEFAULTS.loan_payback, ge=0, allow_inf_nan=False)
    """A loan must work this many times as long as its weight load and offload take (rlix only)."""
    tail_spread_batch: int = Field(_POLICY_DEFAULTS.tail_spread_batch, ge=0)
    """An on-policy tail running more than this many trajectories per busy rank, whose engine
    migrates them, takes part in the split instead of being held; 0: every tail held (rlix only)."""
    max_drain_s: float = Field(_POLICY_DEFAULTS.max_drain_s, ge=0, allow_inf_nan=False)
    """A rank on its own home cut for another job's grant finishes what it runs first, taking
    nothing new, for as long as that job holds the cluster and at most this long; the grant
    waits as long at most. Loans are cut at once. 0: cut at once (rlix only)."""
    stack_by_runtime: bool = _POLICY_DEFAULTS.stack_by_runtime
    """A home given as a size stacks first with homes of jobs of like expected runtime (rlix only)."""
    alike_stack_depth: int = Field(_POLICY_DEFAULTS.alike_stack_depth, ge=0)
    """Once homes must overlap, a home joins a stack of alike jobs holding fewer than this many
    homes before taking GPUs no home covers; 0: off (rlix only)."""
    alike_reserve_homes: float = Field(_POLICY_DEFAULTS.alike_reserve_homes, ge=0, allow_inf_nan=False)
    """With alike_stack_depth, a home takes GPUs no home covers instead of joining its kind's
    stack when the GPUs left uncovered after it would still hold this many homes of its size;
    a number above the pool's homes (1e9): it joins whenever homes must overlap (rlix only)."""
    stack_by_departure: bool = _POLICY_DEFAULTS.stack_by_departure
    """Among stacks of alike jobs, a home joins first the one whose jobs are expected to leave
    when its job would, so stacks empty together (rlix only)."""
    keep_warm: bool = _POLICY_DEFAULTS.keep_warm
    """A pipeline's rollout ranks stay loaded between its rollouts while no one needs their
    GPUs, so its next rollout starts without a weight load (rlix only)."""
    finish_together: float = Field(_POLICY_DEFAULTS.finish_together, ge=0, allow_inf_nan=False)
    """gamma > 0: each job's rollout share is weighed by (its projected time left / the longest)
    ** gamma, so the jobs that finish last get the GPUs the early ones can spare: for a study
    judged by its makespan; in a stream of jobs it would serve the longest first. A job so
    weighed whose tails last longer than min_rebalance_interval_s is not held at its busy ranks
    in its tail (keep_busy_tail): the weights say whose ranks are worth more. 0: off (rlix only)."""
    finish_floor: float = Field(_POLICY_DEFAULTS.finish_floor, gt=0, le=1, allow_inf_nan=False)
    """With finish_together, the least weight a job's share is given, so a job well ahead of
    the last still finishes soon (rlix only)."""

    wake_ahead: bool = _POLICY_DEFAULTS.wake_ahead
    """A job away between steps whose last absence ended in a rollout has its rollout ranks
    loaded on its own home its load time before it is expected back, so its next rollout does
    not wait for them (rlix only)."""
    training_yields: bool = _POLICY_DEFAULTS.training_yields
    """With finish_together: a job whose training cluster is held or requested weighs half its
    finish weight in the split, and a job with rollout work and no rank takes a bundle on GPUs
    no home covers from such a job weighing at most a third as much (rlix only)."""
    prefetch_weights: bool = _POLICY_DEFAULTS.prefetch_weights
    """A job reads its training clusters' weights into host memory before it asks for their GPUs
    to init on, so each init holds them only to copy the weights in and set up (rlix only)."""

    def spec(self) -> PolicyConfig:
        return PolicyConfig(**self.model_dump())


class PolicySection(Section):
    """Which policy decides, and its tunables."""

    name: str = "rlix"
    """A policy of `rlix.policy.POLICIES`: rlix, gap-ratio, static or sequential."""
    config: PolicyTunables = Field(default_factory=PolicyTunables)
    """Overrides of `rlix.policy.PolicyConfig`."""

    @field_validator("name")
    @classmethod
    def _known_policy(cls, name: str) -> str:
        if name not in POLICIES:
            raise ValueError(f"unknown policy (known: {', '.join(sorted(POLICIES))})")
        return name


class TraceRef(Section):
    """Where rollout lengths come from: a bundled trace (`bundled:`) or a file (`path:`)."""

    bundled: str | None = None
    """Name of a trace bundled with rlix (`rlix.traces.bundled_names()`)."""
    path: str | None = None
    """A CSV, JSONL/JSON or Parquet trace. Relative paths are relative to the scenario file;
    the resolved scenario holds the absolute path."""
    columns: dict[str, str] = {}
    """Column map for a file: rlix name -> the file's column (response_tokens: GeneratedTokens)."""
    format: Literal["csv", "jsonl", "json", "parquet"] | None = None
    """The file's format when its suffix does not say."""
    max_response_tokens: int | None = Field(None, gt=0)
    """Length cap: longer samples are clipped to it (and marked `capped`). None: the trace's own."""

    @field_validator("bundled")
    @classmethod
    def _known_bundled(cls, name: str | None) -> str | None:
        from rlix.traces.bundled import bundled_names

        if name is not None and name not in bundled_names():
            raise ValueError(f"no bundled trace of that name (bundled: {', '.join(bundled_names())})")
        return name

    @field_validator("path")
    @classmethod
    def _existing_file(cls, path: str | None, info: ValidationInfo) -> str | None:
        if path is None:
            return None
        base = (info.context or {}).get("base_dir")
        resolved = Path(base or ".").joinpath(Path(path).expanduser()).resolve()
        if not resolved.is_file():
            what = "not a file" if resolved.exists() else "no such trace file"  # a folder, /dev/null
            raise ValueError(f"{what} ({resolved})")
        return str(resolved)

    @field_validator("columns")
    @classmethod
    def _known_targets(cls, columns: dict[str, str]) -> dict[str, str]:
        from rlix.traces.columns import as_column_map
        from rlix.traces.errors import TraceError

        try:
            as_column_map(columns)
        except TraceError as exc:
            raise ValueError(str(exc)) from None
        return columns

    @model_validator(mode="after")
    def _one_source(self) -> TraceRef:
        if (self.bundled is None) == (self.path is None):
            raise FieldProblem((), NO_VALUE, "give exactly one of `bundled:` and `path:`")
        if self.bundled is not None and self.columns:
            raise FieldProblem(("columns",), self.columns, "a column map needs a file trace (`path:`)")
        if self.bundled is not None and self.format is not None:
            raise FieldProblem(("format",), self.format, "a format needs a file trace (`path:`)")
        return self

    def load(self) -> pd.DataFrame:
        """Read the trace (validated by rlix.traces) and apply `max_response_tokens`."""
        from rlix.traces import load_bundled, read_trace

        if self.bundled is not None:
            frame = load_bundled(self.bundled)
        else:
            assert self.path is not None
            frame = read_trace(self.path, self.columns or None, self.format)
        cap = self.max_response_tokens
        if cap is not None:
            over = frame["response_tokens"] >= cap
            frame["capped"] = over | frame["capped"] if "capped" in frame else over
            frame["response_tokens"] = frame["response_tokens"].clip(upper=cap)
        return frame


class EngineConfig(Section):
    """Rollout engine parameters. Both drivers read `max_batch`, `progress_every` and `balance`
    (the executor's ranks take at most `max_batch` trajectories a call, an even share of those
    open when balanced); the executor cannot migrate (a call runs to its end), so a live run
    records `migrate_on_expand: false` and refuses it set true."""

    max_batch: int = Field(256, gt=0)
    """Most trajectories one rollout rank decodes at once (continuous batching)."""
    progress_every: float = Field(0.02, gt=0, le=1, allow_inf_nan=False)
    """Report rollout progress to the core each time this share of a step's rollout work is done."""
    balance: bool = True
    """Route like a load-balancing router in front of the data-parallel ranks (least-loaded
    dispatch): a rank admits only while it runs fewer than min(max_batch, ceil(R / E)), R the
    pipeline's trajectories queued or running, E its ranks (loading ones too). False: each rank
    fills up to max_batch from the shared queue in turn."""
    migrate_on_expand: bool = True
    """When a rank joins, the others move the sequences they run above that even share to it
    (prefix kept and recomputed, like a preemption), as Seer's divided rollout migrates requests
    between instances (arXiv 2511.14617)."""


class FaultEvent(Section):
    """One fault: kill a pipeline (`kill:`) or lose GPUs (`lose_gpu:`), at `at_s`."""

    at_s: float = Field(ge=0, le=MAX_TIME_S, allow_inf_nan=False)
    """When, in seconds from the start of the run."""
    kill: str | None = None
    """Id of the pipeline that crashes (removed; its GPUs are freed)."""
    lose_gpu: GpuSet | None = None
    """GPU id (or set, e.g. a node "8-15") that fails."""
    restore_at_s: float | None = Field(None, allow_inf_nan=False)
    """When the lost GPUs come back (after `at_s`); None: never."""

    @model_validator(mode="after")
    def _one_fault(self) -> FaultEvent:
        if (self.kill is None) == (self.lose_gpu is None):
            raise FieldProblem((), NO_VALUE, "a fault is either `kill: <pipeline id>` or `lose_gpu: <GPU ids>`")
        if self.restore_at_s is not None:
            if self.lose_gpu is None:
                raise FieldProblem(("restore_at_s",), self.restore_at_s, "only lost GPUs are restored")
            if not self.restore_at_s > self.at_s:
                raise FieldProblem(
                    ("restore_at_s",), self.restore_at_s, f"restore must come after the loss at_s={self.at_s}"
                )
        if self.lose_gpu is not None and not self.lose_gpu:
            raise FieldProblem(("lose_gpu",), self.lose_gpu, "names no GPU")
        return self

    @property
    def until_s(self) -> float:
        """When the fault ends (inf: never)."""
        return math.inf if self.restore_at_s is None else self.restore_at_s


class FaultsConfig(Section):
    """Injected faults (both drivers carry them out)."""

    events: list[FaultEvent] = []
    """Pipeline kills and GPU losses, in any order."""
    decision_failure_rate: float = Field(0.0, ge=0, lt=1, allow_inf_nan=False)
    """Share of GPU decisions (grant, expand, shrink) the driver reports failed instead of applied."""


class ExecutorConfig(Section):
    """The Ray executor's settings (the simulator ignores them). The executor checks names
    (task, reward) against its registries."""

    # Not empty: "" is the current directory to a path, read as a model folder.
    model: str = Field("tiny", min_length=1)
    """"tiny" (a small Qwen2-style model built from a config) or a local model directory."""
    backend: Literal["hf", "vllm"] = "hf"
    """Rollout backend: hf (transformers generate, CPU or GPU) or vllm (GPU only)."""
    actor_lr: float = Field(1e-5, gt=0, allow_inf_nan=False)
    """Learning rate of full-finetune actors."""
    critic_lr: float = Field(1e-5, gt=0, allow_inf_nan=False)
    """Learning rate of critics (ppo)."""
    lora_lr: float = Field(1e-4, gt=0, allow_inf_nan=False)
    """Learning rate of LoRA adapters."""
    lora_rank: int = Field(8, gt=0)
    """LoRA rank r."""
    lora_alpha: float = Field(16.0, gt=0, allow_inf_nan=False)
    """LoRA scaling alpha."""
    kl_coef: float = Field(1e-3, ge=0, allow_inf_nan=False)
    """KL penalty weight for pipelines with `kl: true`."""
    clip_ratio: float = Field(0.2, gt=0, allow_inf_nan=False)
    """PPO/GRPO ratio clip epsilon."""
    max_new_tokens: int = Field(64, gt=0)
    """Generation length cap of the real rollouts."""
    temperature: float = Field(1.0, gt=0, allow_inf_nan=False)
    """Sampling temperature."""
    task: str | None = None
    """Prompt task by registry name; None: the executor's default."""
    reward: str | None = None
    """Reward function by registry name; None: the task's own."""
    num_cpus: int | None = Field(None, gt=0)
    """CPUs Ray may use when it starts locally; None: Ray's default."""
    checkpoint_every: int = Field(10, ge=0)
    """Checkpoint each pipeline (each adapter) after every this many steps; 0: never. The
    simulator charges the same checkpoints (weights and optimizer state written to storage)."""
    keep_checkpoints: int = Field(2, gt=0)
    """How many checkpoints of each pipeline are kept (the newest)."""
