"""The actors that work on GPUs: one rollout worker per rollout rank, one trainer per training cluster.

Both are placed by `rlix.executor.placement.GpuPool` in the bundle of their first GPU and set
`CUDA_VISIBLE_DEVICES` to exactly their GPUs before building anything. They wrap plain objects
that know nothing of Ray:

- an `Engine` (a rollout backend: hf, vllm, or the synthetic load generator) that loads weights
  (base, then adapters), takes in-place updates, unloads, and generates until every trajectory
  is done or it is told to stop, leaving each trajectory with the tokens it has so far;
- a `Trainer` (actor, critic, reference, multi-LoRA), whose methods the pipeline's workload
  calls by name (`call`), and whose weights go to the object store as the host copy the
  rollout ranks load from (`export`).

A rollout worker holds weights only between `wake` and `sleep` (while its rank is active).
`stop` is sticky until the next `wake`, so a stop that overtakes a queued `generate` still
stops it.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from rlix.executor.trajectories import Attempt, Trajectory


class Engine(Protocol):
    def load(self, weights: dict[str, tuple[int, Any]]) -> None:
        """Load weights: adapter name -> (version, state); the base model under its own name."""

    def update(self, adapter: str, version: int, state: Any) -> None:
        """Replace one adapter's (or the base's) weights in place."""

    def unload(self) -> None:
        """Drop weights and caches (the rank's GPUs go to someone else)."""

    def generate(self, items: list[Trajectory], should_stop: Callable[[], bool]) -> list[int]:
        """Extend each item's `response` (resuming from it), set `done` on finished ones, return
        when all are done or `should_stop()`; returns prefix tokens recomputed per item."""


class Trainer(Protocol):
    def export_weights(self, adapter: str) -> Any:
        """The weights the rollout ranks need for `adapter` (the base for a full finetune)."""


def _set_devices(visible_devices: str) -> None:
    # Before torch (or anything CUDA) is imported in this process.
    os.environ["CUDA_VISIBLE_DEVICES"] = visible_devices


class RolloutWorker:
    """One rollout rank's process (async actor: `stop` runs while `generate` works in a thread)."""

    def __init__(self, pipeline_id: str, dp_rank: int, visible_devices: str,
                 engine_factory: Callable[[], Engine], t0_wall: float) -> None:
        _set_devices(visible_devices)
        self.pipeline_id = pipeline_id
        self.dp_rank = dp_rank
        self.t0_wall = t0_wall
        self.engine = engine_factory()
        self.versions: dict[str, int] = {}
        self._stop = threading.Event()
        self._stop.set()  # asleep until the first wake
        # What starting this process cost in CPU (booting the worker, importing the engine's
        # libraries, building it): on CPU-declared GPUs it is taken from everyone else's work
        # (rlix.sim.cpu_work).
        self.start_cpu_s = time.process_time()
        self.started_at = time.monotonic()
        #: CPU seconds spent loading and dropping weights (wake, sleep), and generating.
        self.moves_cpu_s = 0.0
        self.generate_cpu_s = 0.0
        self.num_wakes = 0

    def started_cpu_s(self) -> float:
        """CPU seconds this process had used when it was ready."""
        return self.start_cpu_s

    def cpu_account(self) -> dict[str, float]:
        """Where this process's CPU went so far: its start, weight moves (and how many wakes),
        generation, and in all (what is left is the idle process: Ray's threads, the event
        loop), over how long it has been up (rlix.sim.cpu_work)."""
        return {"start_s": self.start_cpu_s, "moves_s": self.moves_cpu_s, "wakes": float(self.num_wakes),
                "generate_s": self.generate_cpu_s, "total_s": time.process_time(),
                "alive_s": time.monotonic() - self.started_at}

    def _now(self) -> float:
        return time.time() - self.t0_wall

    async def wake(self, weights: dict[str, tuple[int, Any]]) -> None:
        """Load the newest weights (`adapter -> (version, [ObjectRef])`) and accept work."""
        cpu0 = time.process_time()
        loaded = {}
        for adapter, (version, ref) in weights.items():
            loaded[adapter] = (version, await ref[0])
        await asyncio.to_thread(self.engine.load, loaded)
        self.versions = {a: v for a, (v, _s) in loaded.items()}
        self._stop.clear()
        self.moves_cpu_s += time.process_time() - cpu0
        self.num_wakes += 1

    async def update(self, adapter: str, version: int, ref: list[Any]) -> None:
        state = await ref[0]
        await asyncio.to_thread(self.engine.update, adapter, version, state)
        self.versions[adapter] = version

    async def generate(self, items: list[Trajectory]) -> list[Attempt]:
        t_start = self._now()
        if self._stop.is_set() or not items:
            return [Attempt(t, self.dp_rank, self.versions.get(t.adapter, -1), t_start, t_start) for t in items]
        versions = {t.adapter: self.versions[t.adapter] for t in items}
        before = [len(t.response) for t in items]
        cpu0 = time.process_time()
        recomputed = await asyncio.to_thread(self.engine.generate, items, self._stop.is_set)
        self.generate_cpu_s += time.process_time() - cpu0
        t_end = self._now()
        attempts = []
        for t, n_before, n_recomputed in zip(items, before, recomputed, strict=True):
            version = versions[t.adapter]
            if t.weight_version < 0 and len(t.response) > n_before:
                t.weight_version = version
            attempts.append(Attempt(t, self.dp_rank, version, t_start, t_end, n_recomputed))
        return attempts

    async def stop(self) -> None:
        self._stop.set()

    async def sleep(self) -> None:
        cpu0 = time.process_time()
        self._stop.set()
        await asyncio.to_thread(self.engine.unload)
        self.versions = {}
        self.moves_cpu_s += time.process_time() - cpu0

    def pid(self) -> int:
        return os.getpid()

    def where(self) -> tuple[str, str]:
        """(Ray node id, CUDA_VISIBLE_DEVICES) of this process."""
        import ray

        return ray.get_runtime_context().get_node_id(), os.environ.get("CUDA_VISIBLE_DEVICES", "")


class TrainerWorker:
    """One training cluster's process: its trainer's methods, called by name."""

    def __init__(self, pipeline_id: str, cluster: str, visible_devices: str,
                 trainer_factory: Callable[[], Any]) -> None:
        _set_devices(visible_devices)
        self.pipeline_id = pipeline_id
        self.cluster = cluster
        self.trainer = trainer_factory()

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(getattr(self.trainer, method), *args, **kwargs)

    async def export(self, adapter: str) -> list[Any]:
        """Put `adapter`'s weights in the object store (this node's host memory); the reference
        is wrapped in a list so Ray hands the reference, not the weights, to the caller."""
        import ray

        state = await asyncio.to_thread(self.trainer.export_weights, adapter)
        return [ray.put(state)]

    def pid(self) -> int:
        return os.getpid()
