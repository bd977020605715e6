"""How the simulator carries the core's decisions out (the simulator's actuator).

A grant is applied at once (the stage's own time includes getting its model onto the GPUs).
An expansion loads the current weights onto the rank's GPUs (the cost model's load time), then
the rank's engine starts and the expansion is reported applied. A shrink stops the engine at
once (its in-flight trajectories go back to the pipeline's queue with their prefixes), offloads
for the cost model's offload time (a multi-LoRA engine copies its base to host memory, a
full-finetune one drops its weights, as the executor's engines sleep), then is reported applied; a shrink that drains (`drain_s`)
first closes the engine to admissions and stops it when it runs nothing or at `drain_s`,
whichever comes first. A share of decisions can be made
to fail (`faults.decision_failure_rate`), seeded, to exercise the core's two-phase undo. A
Revoke (a GPU under the holding was lost) aborts the stage or stops the rank's engine; an
expansion revoked while its weights load never starts its engine and is not reported (the core
has forgotten it, and may expand the same rank again once the GPU is back).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rlix.policy import decisions as dec
from rlix.policy.specs import ROLLOUT_CLUSTER

if TYPE_CHECKING:
    from rlix.sim.simulation import Simulation


class SimActuator:
    def __init__(self, sim: Simulation, failure_rate: float, seed: int) -> None:
        self.sim = sim
        self.failure_rate = failure_rate
        self.rng = np.random.default_rng([seed, 0xFA11])
        # The expansion loading onto each (pipeline, dp_rank), by decision id.
        self._loading: dict[tuple[str, int], int] = {}

    def carry_out(self, decision: dec.Grant | dec.Expand | dec.Shrink) -> None:
        sim = self.sim
        if self.failure_rate and self.rng.random() < self.failure_rate:
            sim.loop.failed(decision.decision_id, "injected failure")
            sim.schedule_tick(sim.scenario_retry_s)
            return
        if isinstance(decision, dec.Grant):
            sim.loop.applied(decision.decision_id)
        elif isinstance(decision, dec.Expand):
            sim.env.process(self._expand(decision))
        else:
            sim.env.process(self._shrink(decision))

    def wake_at(self, at_s: float) -> None:
        sim = self.sim
        sim.schedule_tick(max(at_s - float(sim.env.now), 0.0))

    def revoke(self, decision: dec.Revoke) -> None:
        sim = self.sim
        if decision.dp_rank >= 0:
            self._loading.pop((decision.pipeline_id, decision.dp_rank), None)
            rollout = sim.rollouts.get(decision.pipeline_id)
            if rollout is not None:
                rollout.remove_engine(decision.dp_rank)
        else:
            sim.abort_stage(decision.pipeline_id, decision.cluster)

    def _expand(self, decision: dec.Expand) -> Any:
        sim = self.sim
        t0 = sim.env.now
        costs = sim.costs[decision.pipeline_id]
        key = (decision.pipeline_id, decision.dp_rank)
        self._loading[key] = decision.decision_id
        if costs.expand_overhead_s:  # measured: the driver's calls before the rank loads
            yield sim.env.timeout(costs.expand_overhead_s)
            t0 = sim.env.now
        # Opened, not added at the end: a run cut mid-load still shows the GPUs loading to the cut.
        loading = sim.recorder.open_activity(
            decision.pipeline_id, ROLLOUT_CLUSTER, decision.dp_rank, decision.gpus, "loading", "load", t0
        )
        yield sim.env.timeout(costs.weight_load_seconds(len(decision.gpus)))
        if self._loading.get(key) != decision.decision_id:
            sim.recorder.close_activity(loading, None)
            return  # revoked while loading (a GPU was lost): no engine, nothing to report
        del self._loading[key]
        rollout = sim.rollouts.get(decision.pipeline_id)
        if rollout is None or not rollout.alive:
            sim.recorder.close_activity(loading, None)
            return  # the pipeline went away while loading; the core forgot the decision
        sim.recorder.close_activity(loading, sim.env.now)
        rollout.add_engine(decision.dp_rank)
        sim.loop.applied(decision.decision_id)

    def _shrink(self, decision: dec.Shrink) -> Any:
        sim = self.sim
        rollout = sim.rollouts.get(decision.pipeline_id)
        if rollout is not None and decision.drain_s > 0:
            # Let it finish what it runs, taking nothing new, for drain_s at most.
            yield rollout.drain(decision.dp_rank) | sim.env.timeout(decision.drain_s)
            rollout = sim.rollouts.get(decision.pipeline_id)
        if rollout is not None:
            rollout.remove_engine(decision.dp_rank)
        costs = sim.costs[decision.pipeline_id]
        if costs.shrink_overhead_s:  # measured: the driver's calls before the rank offloads
            yield sim.env.timeout(costs.shrink_overhead_s)
        keeps_weights = sim.pipelines[decision.pipeline_id].kind == "multi_lora"
        offloading = sim.recorder.open_activity(
            decision.pipeline_id, ROLLOUT_CLUSTER, decision.dp_rank, decision.gpus, "loading", "offload", sim.env.now
        )
        yield sim.env.timeout(costs.offload_seconds(len(decision.gpus), keeps_weights))
        sim.recorder.close_activity(offloading, sim.env.now)
        sim.loop.applied(decision.decision_id)
