"""The simulator: a SimPy model of a GPU cluster driving `rlix.policy` through the shared loop.

`simulate(scenario, ...)` builds one `Simulation`: the core, the loop and recorder of
`rlix.runs`, one host per pipeline running its program (`rlix.pipelines`), one rollout engine
group per pipeline (`rlix.sim.rollout`), the actuator that carries decisions out
(`rlix.sim.actuator`) and the scenario's faults. The simulator owns the clock and does the work
a stage would take (cost model); it never decides who holds a GPU.
"""

from __future__ import annotations

import dataclasses
import gc
import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import simpy
from pandas.api.types import union_categoricals

from rlix.pipelines import ops
from rlix.pipelines.ops import Program
from rlix.pipelines.programs import program_for
from rlix.policy import PipelineSpec, Scheduler
from rlix.policy import events as ev
from rlix.policy.specs import WEIGHTS_CLUSTER, PipelineKind
from rlix.runs.host import FORK, RETRY, WAIT, WORK, Host, program_under
from rlix.runs.loop import Loop
from rlix.runs.recorder import Recorder
from rlix.runs.stream import RunSink
from rlix.scenarios.programs import program_config
from rlix.sim.actuator import SimActuator
from rlix.sim.batches import Batch, BatchSampler
from rlix.sim.costs import CostModel
from rlix.sim.engine import RolloutGroup
from rlix.sim.rollout import PipelineRollout
from rlix.sim.stages import checkpoint_seconds, pipeline_costs, publish_seconds, stage_seconds

#: Ticks let the core retry backed-off decisions and end rebalance hold-offs even when no
#: other event comes (simulated seconds).
TICK_S = 30.0
#: A run in which nothing but ticks happened for this long (no engine running, no pipeline
#: still to arrive) is stuck: the policy left work waiting on GPUs that sit idle. The run
#: stops and says so instead of ticking forever (simulated seconds).
STALL_S = 6 * 3600.0
ABORTED = object()


class SimFutures:
    """Host futures as SimPy events."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env

    def new(self) -> simpy.Event:
        return self.env.event()

    def resolve(self, future: simpy.Event, value: Any) -> None:
        future.succeed(value)


@dataclass
class SimResult:
    summary: dict[str, Any]
    tables: dict[str, pd.DataFrame]
    run_dir: Path | None
    recorder: Recorder
    specs: dict[str, PipelineSpec]


class Simulation:
    def __init__(
        self, scenario: Any, policy: str, seed: int, check_invariants: bool = False,
        runtime_estimates_s: dict[str, float] | None = None, sink: RunSink | None = None,
    ) -> None:
        self.scenario = scenario
        self.policy = policy
        self.seed = seed
        self.env = simpy.Environment()
        topology = scenario.topology()
        config = scenario.policy_config()
        self.scheduler = Scheduler(topology, policy, config, check_invariants=check_invariants)
        self.recorder = Recorder(topology, policy, config, sink)
        #: Whether attempt rows are kept (a streamed run folder without the rollouts table
        #: keeps counts only, and no per-trajectory state past the open trajectories).
        self.keep_rollouts = sink is None or "rollouts" in sink.tables
        self.scenario_retry_s = config.retry_backoff_s
        self.actuator = SimActuator(self, scenario.faults.decision_failure_rate, seed)
        self.loop = Loop(
            self.scheduler,
            self.recorder,
            self.actuator,
            clock=lambda: float(self.env.now),
            defer=self._at_end_of_moment,
        )
        self.futures = SimFutures(self.env)
        self.specs = scenario.pipeline_specs(policy)
        #: Each pipeline's time alone on its home, when it was simulated for the policy.
        self.alone_s = runtime_estimates_s
        for pid, estimate_s in (runtime_estimates_s or {}).items():
            if self.specs[pid].runtime_estimate_s is None:  # one the scenario gives stays
                self.specs[pid] = dataclasses.replace(self.specs[pid], runtime_estimate_s=estimate_s)
        if scenario.engine.migrate_on_expand:  # the simulated engine moves running trajectories
            for pid, spec in self.specs.items():
                self.specs[pid] = dataclasses.replace(spec, rollout_migrates=True)
        self.pipelines = {p.id: p for p in scenario.pipelines}
        self.costs: dict[str, CostModel] = pipeline_costs(scenario)
        self._samplers: dict[str, BatchSampler] = {}
        self.samplers = {
            (p.id, a): self._sampler(ref) for p in scenario.pipelines for a, ref in _traces(p)
        }
        self.hosts: dict[str, Host[simpy.Event]] = {}
        self.rollouts: dict[str, PipelineRollout] = {}
        self.threads: dict[str, list[simpy.Process]] = {}
        self.stages: dict[tuple[str, str], simpy.Process] = {}
        self.batch_tokens: dict[tuple[str, str, int], int] = {}
        # Per (pipeline, adapter): when each weight version was published, kept as an array
        # (looked up for every batch of attempt rows).
        self.publish_times: dict[tuple[str, str], np.ndarray] = {}
        self.num_unfinished = len(self.pipelines)
        self.num_ticks = 0
        #: When the run was found stuck (see STALL_S), or None.
        self.stalled_at_s: float | None = None
        self.t_last_finish = 0.0

    def placed_specs(self) -> dict[str, PipelineSpec]:
        """Each pipeline's spec as the run used it (a sized home as the core placed it), for
        the pipelines that arrived: one due after a cut run ended was never registered, so its
        run folder read back has no such pipeline, and neither do the run's own figures."""
        return {pid: self.hosts[pid].spec for pid in self.specs if pid in self.hosts}

    def _sampler(self, ref: Any) -> BatchSampler:
        key = ref.model_dump_json()
        if key not in self._samplers:
            self._samplers[key] = BatchSampler(ref.load(), self.seed)
        return self._samplers[key]

    # --- pipelines ------------------------------------------------------------------------

    def start_pipeline(self, pipeline_id: str) -> Generator[simpy.Event, Any, None]:
        pipeline = self.pipelines[pipeline_id]
        yield self.env.timeout(pipeline.arrival_s)
        spec = self.specs[pipeline_id]
        costs = self.costs[pipeline_id]
        rollout_spec = spec.rollout
        executor = self.scenario.executor
        program = program_under(program_config(pipeline, executor.checkpoint_every if executor is not None else 0),
                                self.scheduler)
        host: Host[simpy.Event] = Host(self.loop, spec, program, self.futures)
        self.hosts[pipeline_id] = host
        engine = self.scenario.engine
        group = RolloutGroup(
            costs,
            rollout_spec.tp,
            engine.max_batch,
            costs.kv_capacity_tokens(rollout_spec.tp),
            balance=engine.balance,
            migrate_on_expand=engine.migrate_on_expand,
        )
        self.rollouts[pipeline_id] = PipelineRollout(self, pipeline_id, group, host, engine.progress_every)
        self.threads[pipeline_id] = []
        host.start()
        if costs.launch_seconds():  # measured: a live pipeline's actor starts before it asks
            yield self.env.timeout(costs.launch_seconds())
        self.start_thread(host, program_for(program))

    def start_thread(self, host: Host[simpy.Event], program: Program) -> None:
        host.thread_started()
        self.threads[host.pipeline_id].append(self.env.process(self._thread(host, program)))

    def _thread(
        self, host: Host[simpy.Event], program: Program
    ) -> Generator[simpy.Event, Any, None]:
        value: Any = None
        try:
            while True:
                try:
                    op = program.send(value)
                except StopIteration:
                    break
                kind, x = host.step(op, program)
                while kind == WORK:
                    t0 = float(self.env.now)
                    result = yield from self._work(host, x)
                    kind, x = host.finish(x, result, t0)
                    if kind == RETRY:
                        yield x
                        kind, x = WORK, op
                if kind == WAIT:
                    value = yield x
                elif kind == FORK:
                    self.start_thread(host, x)
                    value = None
                else:
                    value = x
        except simpy.Interrupt:
            return  # the pipeline was killed
        host.thread_finished(program)
        if not host.alive:
            self._finished(host.pipeline_id)

    def _finished(self, pipeline_id: str) -> None:
        rollout = self.rollouts.get(pipeline_id)
        if rollout is not None:
            rollout.stop("aborted")
        self.num_unfinished -= 1
        self.t_last_finish = float(self.env.now)

    def kill(self, pipeline_id: str) -> None:
        host = self.hosts.get(pipeline_id)
        if host is None or not host.alive:
            return
        for process in self.threads.get(pipeline_id, []):
            if process.is_alive and process is not self.env.active_process:
                process.interrupt("kill")
        host.kill()
        self._finished(pipeline_id)

    # --- work -----------------------------------------------------------------------------

    def _work(
        self, host: Host[simpy.Event], op: ops.Work
    ) -> Generator[simpy.Event, Any, Any]:
        pid = host.pipeline_id
        if isinstance(op, ops.Generate):
            batch = self.samplers[(pid, op.adapter)].sample(
                pid, op.adapter, op.step, op.num_prompts, op.samples_per_prompt
            )
            self.batch_tokens[(pid, op.adapter, op.step)] = batch.num_tokens
            return self.rollouts[pid].submit(op.adapter, op.step, batch)
        costs = self.costs[pid]
        if isinstance(op, ops.Publish):
            full = host.spec.kind is PipelineKind.FULL_FINETUNE
            yield self.env.timeout(publish_seconds(costs, full))
            key = (pid, op.adapter)
            times = self.publish_times.get(key, np.empty(0))
            self.publish_times[key] = np.append(times, float(self.env.now))
            return None
        if isinstance(op, ops.Prefetch):
            yield self.env.timeout(costs.prefetch_seconds())
            return None
        if isinstance(op, ops.Checkpoint):
            full = host.spec.kind is PipelineKind.FULL_FINETUNE
            yield self.env.timeout(checkpoint_seconds(costs, full, "critic" in host.spec.clusters))
            return None
        gpus = host.spec.clusters[op.cluster].mapping  # as placed, for a sized home
        tokens = self.batch_tokens.get((pid, op.adapter, op.step), 0)
        duration = stage_seconds(costs, op.stage, tokens, len(gpus), host.config.prefetch_weights)
        # Opened, not added at the end: a run cut mid-stage still shows the GPUs busy to the cut.
        busy = self.recorder.open_activity(pid, op.cluster, -1, gpus, "busy", op.stage, float(self.env.now))
        stage = self.env.active_process
        assert stage is not None  # this generator runs as the stage's process
        self.stages[(pid, op.cluster)] = stage
        try:
            yield self.env.timeout(duration)
            self.recorder.close_activity(busy, float(self.env.now))
            if op.stage == "init" and op.cluster == WEIGHTS_CLUSTER:
                # As a live pipeline does: its init ends once every rollout rank's worker has
                # started (after the trainer, one at a time), the GPUs held meanwhile.
                worker_start_s = costs.worker_start_seconds(host.spec.kind is PipelineKind.MULTI_LORA)
                if worker_start_s:
                    yield self.env.timeout(worker_start_s * host.spec.rollout.num_ranks)
        except simpy.Interrupt as interrupt:
            if interrupt.cause != "revoke":
                raise
            return ABORTED
        finally:
            self.recorder.close_activity(busy, float(self.env.now))  # revoked mid-stage (a no-op after)
            self.stages.pop((pid, op.cluster), None)
        return None

    def abort_stage(self, pipeline_id: str, cluster: str) -> None:
        process = self.stages.get((pipeline_id, cluster))
        if process is not None and process.is_alive:
            process.interrupt("revoke")

    # --- faults and time ------------------------------------------------------------------

    def schedule_tick(self, delay_s: float) -> None:
        def tick() -> Generator[simpy.Event, Any, None]:
            yield self.env.timeout(delay_s + 1e-6)
            if self.num_unfinished:
                self.num_ticks += 1
                self.loop.send(ev.Tick(float(self.env.now)))

        self.env.process(tick())

    def _ticks(self) -> Generator[simpy.Event, Any, None]:
        """A tick every TICK_S while a pipeline is in the pool. With none there (before the first
        arrival, or between the last end and the next) the ticks the core would get with nothing
        to decide are skipped up to the tick before the next arrival, in the same phase: a job
        log whose first arrival is days away does not cost a tick per 30 s till then."""
        num_ticks_s = 0
        while self.num_unfinished:
            num_ticks_s = max(num_ticks_s, math.floor(self._next_arrival_if_idle() / TICK_S)) + 1
            yield self.env.timeout(num_ticks_s * TICK_S - float(self.env.now))
            if self.num_unfinished:
                self.num_ticks += 1
                self.loop.send(ev.Tick(float(self.env.now)))

    def _fault(self, fault: Any) -> Generator[simpy.Event, Any, None]:
        yield self.env.timeout(fault.at_s)
        if fault.kill is not None:
            self.kill(fault.kill)
            return
        lost = list(fault.lose_gpu or ())
        for gpu in lost:
            self.loop.send(ev.GpuLost(float(self.env.now), gpu))
        if fault.restore_at_s is not None:
            yield self.env.timeout(fault.restore_at_s - fault.at_s)
            for gpu in lost:
                self.loop.send(ev.GpuRestored(float(self.env.now), gpu))

    def _at_end_of_moment(self, action: Callable[[], None]) -> None:
        """Run `action` after what is already scheduled for now (SimPy runs events of equal
        time in the order they were scheduled): the loop's hook for gathering the applied
        reports of one moment, e.g. the weight loads of one round, into one event."""
        self.env.timeout(0).callbacks.append(lambda _event: action())

    @property
    def num_completed(self) -> int:
        """Trajectories completed so far, over every pipeline (up to the last absorbed stop)."""
        return sum(r.num_completed for r in self.rollouts.values())

    def _next_arrival_if_idle(self) -> float:
        """With no pipeline in the pool, the next arrival (a stretch to run in one step: the
        events on the way, faults included, are still run in order); else 0."""
        if any(host.alive for host in self.hosts.values()):
            return 0.0
        return min((p.arrival_s for pid, p in self.pipelines.items() if pid not in self.hosts), default=0.0)

    def _anything_running(self, now: float) -> bool:
        if any(p.arrival_s > now for p in self.pipelines.values()):
            return True
        return any(r.alive and r.group.num_running for r in self.rollouts.values())

    def run(self, max_time_s: float | None, progress: Any = None) -> float:
        """Run until every pipeline finished or `max_time_s`; returns the end time."""
        for pipeline_id in self.pipelines:
            self.env.process(self.start_pipeline(pipeline_id))
        for fault in self.scenario.faults.events:
            self.env.process(self._fault(fault))
        self.env.process(self._ticks())
        chunk_s = 60.0
        last_facts, last_change_s = -1, 0.0
        # The run keeps millions of small containers alive (engine heaps and dicts, records):
        # at the default thresholds the cyclic collector rescans them every few hundred
        # allocations, 15-25% of a large run's time. Nothing relies on prompt cycle collection.
        thresholds = gc.get_threshold()
        gc.set_threshold(100_000, 50, 100)
        try:
            while self.num_unfinished:
                # Past a stretch with nothing scheduled (a far-off arrival) in one step.
                until = float(self.env.now) + chunk_s
                until = max(until, self._next_arrival_if_idle() + chunk_s)
                if max_time_s is not None:
                    until = min(until, max_time_s)
                if until <= self.env.now:
                    break
                self.env.run(until=until)
                if progress is not None:
                    progress(float(self.env.now))
                facts = self.loop.num_events - self.num_ticks
                now = float(self.env.now)
                if facts != last_facts or self._anything_running(now):
                    last_facts, last_change_s = facts, now
                elif now - last_change_s >= STALL_S:
                    self.stalled_at_s = last_change_s
                    break
        finally:
            gc.set_threshold(*thresholds)
        end = self.t_last_finish if not self.num_unfinished else float(self.env.now)
        for rollout in self.rollouts.values():
            rollout.stop("in_flight")
        self._record_rollouts()
        self.recorder.finish(end)
        return end

    def _record_rollouts(self) -> None:
        """Hand the recorder every pipeline's attempt rows. They stay arrays (32-bit numbers,
        text as Categoricals), into the tables, when the recorder holds no rollout rows yet
        (always, in the simulator): as Python lists a large run's table would take ~400 bytes a row (a
        simulated day of cluster-1024 has ~10^8); the tables are built from either the same
        way (`rlix.runs.frames`)."""
        parts = [rows for r in self.rollouts.values() if (rows := r.take_rows()) is not None]
        if not parts:
            return
        # Column by column, each pipeline's part freed once joined: the peak is one column.
        columns: dict[str, Any] = {}
        for name in list(parts[0]):
            pieces = [p.pop(name) for p in parts]
            if isinstance(pieces[0], pd.Categorical):
                columns[name] = union_categoricals(pieces)
            else:
                # Integers stay 32-bit in the table too (conform_table keeps a narrower width).
                columns[name] = np.concatenate(pieces)
        rollouts = self.recorder.rollouts
        if all(len(rollouts[name]) == 0 for name in columns):
            rollouts.update(columns)
        else:
            self.recorder.add_rollouts({name: list(col) for name, col in columns.items()})


def _traces(pipeline: Any) -> list[tuple[str, Any]]:
    if pipeline.kind == "multi_lora":
        return [(a.name, a.trace) for a in pipeline.adapters]
    return [("base", pipeline.trace)]


__all__ = ["Batch", "SimResult", "Simulation"]
