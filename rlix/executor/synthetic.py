"""The synthetic workload: timed stages and synthetic tokens, to exercise the runtime itself.

No model and no torch: a rollout engine "generates" `chunk_tokens` tokens per trajectory every
`chunk_tokens / tokens_per_s` seconds (all trajectories of a call in parallel, like batched
decoding), each trajectory to a length drawn from [min_tokens, max_tokens] by a hash of its
key (so a resumed trajectory ends where it would have); a stage sleeps `stage_s`; weights are
`weight_mb` megabytes of bytes that really go through the object store to every rank that
loads them. Tests and `bench/exec_overhead.py` use it to measure the executor's own costs:
grant latency, shrink and expand time, weight transfer, re-queueing. `fail_stage: [stage, step]`
makes that stage raise (a pipeline that crashes).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from rlix.executor.trajectories import Trajectory
from rlix.executor.workers import Engine
from rlix.executor.workload import PipelineSetup
from rlix.pipelines import Stage
from rlix.policy.specs import WEIGHTS_CLUSTER

DEFAULTS: dict[str, Any] = {
    "tokens_per_s": 400.0, "chunk_tokens": 8, "min_tokens": 16, "max_tokens": 64,
    "prompt_tokens": 16, "stage_s": 0.05, "init_s": 0.05, "weight_mb": 1.0, "fail_stage": None,
}


def response_length(key: tuple[str, int, int], seed: int, low: int, high: int) -> int:
    digest = zlib.crc32(f"{seed}/{key[0]}/{key[1]}/{key[2]}".encode())
    return low + digest % (high - low + 1)


class SyntheticEngine:
    def __init__(self, params: Mapping[str, Any], seed: int) -> None:
        self.p = params
        self.seed = seed
        self.weights: dict[str, tuple[int, bytes]] = {}

    def load(self, weights: dict[str, tuple[int, Any]]) -> None:
        self.weights = dict(weights)

    def update(self, adapter: str, version: int, state: Any) -> None:
        self.weights[adapter] = (version, state)

    def unload(self) -> None:
        self.weights = {}

    def generate(self, items: list[Trajectory], should_stop: Callable[[], bool]) -> list[int]:
        if not self.weights:
            raise RuntimeError("generate before weights were loaded")
        p = self.p
        targets = [response_length(t.key, self.seed, p["min_tokens"], p["max_tokens"]) for t in items]
        recomputed = [len(t.response) for t in items]
        chunk = int(p["chunk_tokens"])
        while not should_stop():
            live = [(t, n) for t, n in zip(items, targets, strict=True) if not t.done]
            if not live:
                break
            time.sleep(chunk / p["tokens_per_s"])
            for t, n in live:
                t.response.extend([1] * min(chunk, n - len(t.response)))
                t.done = len(t.response) >= n
        return recomputed


class SyntheticTrainer:
    """Timed stages. Its init takes `init_s`; built `on_host` (a prefetch), the load takes it
    instead, before the init, which then takes none."""

    def __init__(self, params: Mapping[str, Any], cluster: str, on_host: bool = False) -> None:
        self.p = params
        self.cluster = cluster
        self.version = 0
        self.init_s = 0.0 if on_host else float(params["init_s"])
        if on_host:
            time.sleep(params["init_s"])

    def stage(self, name: str, adapter: str, step: int) -> dict[str, float]:
        fail = self.p.get("fail_stage")
        if fail is not None and [name, step] == list(fail):
            raise RuntimeError(f"synthetic failure in stage {name} of step {step}")
        time.sleep(self.init_s if step < 0 else self.p["stage_s"])
        if name == "actor_train":
            self.version += 1
        return {"stage_s": self.p["stage_s"]}

    def export_weights(self, adapter: str) -> bytes:
        return bytes(int(self.p["weight_mb"] * 1_000_000))


class SyntheticWorkload:
    weights_cluster = WEIGHTS_CLUSTER

    def __init__(self, setup: PipelineSetup) -> None:
        self.setup = setup
        self.params = {**DEFAULTS, **setup.params}
        self.seed = int(self.params.get("seed", 0))

    def make_batch(self, adapter: str, step: int, num_prompts: int, samples_per_prompt: int,
                   first_id: int) -> list[Trajectory]:
        pid = self.setup.pipeline_id
        return [
            Trajectory(pid, adapter, step, first_id + i, i // samples_per_prompt, None,
                       int(self.params["prompt_tokens"]))
            for i in range(num_prompts * samples_per_prompt)
        ]

    def weight_names(self) -> list[str]:
        return [a.name for a in self.setup.program.adapters]

    def engine_factory(self) -> Callable[[], Engine]:
        params, seed = dict(self.params), self.seed
        return lambda: SyntheticEngine(params, seed)

    def trainer_factory(self, cluster: str, on_host: bool = False) -> Callable[[], Any]:
        params = dict(self.params)
        return lambda: SyntheticTrainer(params, cluster, on_host)

    async def run_stage(self, stage: Stage, trainers: Mapping[str, Any], batch: list[Trajectory] | None) -> Any:
        return await trainers[stage.cluster].call.remote("stage", stage.stage, stage.adapter, stage.step)

    async def save_models(self, trainers: Mapping[str, Any], folder: str) -> None:
        """Synthetic stages train nothing: there is no model to keep."""

    async def models_from_checkpoint(self, checkpoint: str, folder: str) -> None:
        """No model to keep."""

    async def save_checkpoint(self, trainers: Mapping[str, Any], folder: str) -> dict[str, int]:
        """Nothing to save but the step reached (in the checkpoint's metadata)."""
        return {}

    async def restore(self, cluster: str, trainer: Any, folder: str) -> None:
        """Nothing to load: synthetic stages keep no state."""

    def batch_result(self, batch: list[Trajectory]) -> dict[str, Any]:
        high = float(self.params["max_tokens"])
        for t in batch:
            t.extra["reward"] = len(t.response) / high
        return {"reward_mean": sum(t.extra["reward"] for t in batch) / len(batch),
                "response_tokens_mean": sum(len(t.response) for t in batch) / len(batch)}
