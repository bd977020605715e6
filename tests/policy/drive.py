"""A small test driver for the policy core: keeps the two-phase decisions a round emitted and
applies them when told to, and spec shorthands used by several test modules."""

from __future__ import annotations

from rlix.policy import (
    ClusterSpec,
    Decision,
    DecisionApplied,
    Event,
    Expand,
    Grant,
    PipelineAdmitted,
    PipelineKind,
    PipelineRegistered,
    PipelineSpec,
    PolicyConfig,
    Scheduler,
    Shrink,
    Topology,
)
from rlix.policy.decisions import describe


class Driver:
    """Keeps the two-phase decisions a round emitted; applies them when told to."""

    def __init__(self, topology: Topology, config: PolicyConfig | None = None, policy: str = "rlix") -> None:
        self.sched = Scheduler(topology, policy, config=config, check_invariants=True)
        self.outstanding: dict[int, Grant | Expand | Shrink] = {}

    def send(self, event: Event) -> list[str]:
        decisions = self.sched.handle(event)
        self._keep(decisions)
        return [describe(d) for d in decisions]

    def _keep(self, decisions: list[Decision]) -> None:
        for d in decisions:
            if isinstance(d, Grant | Expand | Shrink):
                self.outstanding[d.decision_id] = d

    def apply_all(self) -> None:
        """Report applied, oldest first, every decision whose requirements are settled."""
        while True:
            ready = [
                i for i, d in sorted(self.outstanding.items())
                if not any(r in self.outstanding for r in d.requires)
            ]
            if not ready:
                return
            del self.outstanding[ready[0]]
            self.send(DecisionApplied(self.sched.now, ready[0]))

    def add(self, *specs: PipelineSpec) -> None:
        for spec in specs:
            self.send(PipelineRegistered(self.sched.now, spec))
            self.send(PipelineAdmitted(self.sched.now, spec.pipeline_id))

    def held(self, pipeline_id: str) -> int:
        return self.sched.pipelines[pipeline_id].num_active_gpus


def grants(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("grant")]


def rollout_only(pipeline_id: str, tp: int, num_gpus: int = 8, weight: float = 1.0) -> PipelineSpec:
    return PipelineSpec(
        pipeline_id, PipelineKind.FULL_FINETUNE, {"actor_infer": ClusterSpec(tp, tuple(range(num_gpus)))},
        weight=weight,
    )
