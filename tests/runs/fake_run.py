"""Small finished runs for the tests of rlix.runs: a real core and loop, hand-written work.

`two_pipeline_run` drives `rlix.policy.Scheduler` through `rlix.runs.Loop` with an actuator
that applies every decision at once and a clock the test moves, so `allocations` and
`events.jsonl` are the real thing; busy/loading activity, steps, waits and rollouts are
written by hand from the allocations, as a driver would.
"""

from __future__ import annotations

from rlix.policy import ClusterSpec, PipelineKind, PipelineSpec, PolicyConfig, Scheduler, Topology
from rlix.policy import decisions as dec
from rlix.policy import events as ev
from rlix.runs import Loop, Recorder
from rlix.runs.host import STAGE_COLUMNS

LOAD_S = 2.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class ApplyAtOnce:
    def __init__(self) -> None:
        self.loop: Loop | None = None

    def carry_out(self, decision: dec.Grant | dec.Expand | dec.Shrink) -> None:
        assert self.loop is not None
        self.loop.applied(decision.decision_id)

    def revoke(self, decision: dec.Revoke) -> None:
        pass

    def wake_at(self, at_s: float) -> None:
        pass


def driven(topology: Topology, policy: str) -> tuple[Recorder, Loop, Clock]:
    """A recorder, and a loop over a fresh core of `policy` that applies each decision at once,
    on a clock the test moves."""
    recorder = Recorder(topology, policy, PolicyConfig())
    clock, actuator = Clock(), ApplyAtOnce()
    loop = Loop(Scheduler(topology, policy, PolicyConfig()), recorder, actuator, clock)
    actuator.loop = loop
    return recorder, loop, clock


def specs() -> dict[str, PipelineSpec]:
    rollout = ClusterSpec(1, (0, 1, 2, 3))
    return {
        "p0": PipelineSpec("p0", PipelineKind.FULL_FINETUNE,
                           {"actor_infer": rollout, "actor_train": ClusterSpec(1, (2, 3))}),
        "p1": PipelineSpec("p1", PipelineKind.MULTI_LORA,
                           {"actor_infer": rollout, "actor_train": ClusterSpec(1, (0, 1))},
                           adapters=("a0",), max_staleness=1),
    }


def two_pipeline_run() -> Recorder:
    """A 4-GPU run of two pipelines (p0 two steps, p1 one), with a rollout rank shrunk for each
    reason: release, rebalance (p0's second rollout), preempt (p1's training)."""
    recorder, loop, clock = driven(Topology(1, 4), "rlix")

    def at(t: float, *events: ev.Event) -> None:
        clock.now = t
        for event in events:
            loop.send(event)

    infer, train = "actor_infer", "actor_train"
    at(0.0, *(ev.PipelineRegistered(0.0, s) for s in specs().values()),
       ev.PipelineAdmitted(0.0, "p0"), ev.PipelineAdmitted(0.0, "p1"),
       ev.ClusterRequested(0.0, "p0", train, 0), ev.ClusterRequested(0.0, "p1", train, 0))
    at(10.0, ev.ClusterReleasedAndRequested(10.0, "p0", train, infer, 6, 100.0))
    at(12.0, ev.ClusterReleasedAndRequested(12.0, "p1", train, infer, 6, 100.0))
    at(30.0, ev.RolloutProgressed(30.0, "p0", 40.0), ev.RolloutProgressed(30.0, "p1", 60.0, "a0"))
    at(40.0, ev.ClusterReleasedAndRequested(40.0, "p0", infer, train, 1))
    at(50.0, ev.ClusterReleased(50.0, "p0", train), ev.TrainStepFinished(50.0, "p0", 1))
    at(52.0, ev.ClusterRequested(52.0, "p0", infer, 6, 100.0))
    at(60.0, ev.ClusterReleasedAndRequested(60.0, "p1", infer, train, 1))
    at(65.0, ev.ClusterReleasedAndRequested(65.0, "p0", infer, train, 1))
    at(70.0, ev.ClusterReleased(70.0, "p1", train), ev.TrainStepFinished(70.0, "p1", 1, "a0"))
    at(70.0, ev.ClusterReleased(70.0, "p0", train), ev.TrainStepFinished(70.0, "p0", 2))
    at(70.0, ev.PipelineRemoved(70.0, "p0"), ev.PipelineRemoved(70.0, "p1"))
    recorder.finish(80.0)
    _add_work(recorder)
    return recorder


def _add_work(recorder: Recorder) -> None:
    """Activity, steps, waits and rollouts consistent with the recorded holdings."""
    for pid, cluster, _priority, rank, gpu, t0, t1 in list(recorder.allocations):
        if cluster == "actor_infer":
            recorder.add_activity(pid, cluster, rank, [gpu], "loading", "load", t0, t0 + LOAD_S)
            recorder.add_activity(pid, cluster, rank, [gpu], "busy", "rollout", t0 + LOAD_S, t1 - 1.0)
        else:
            stage = "init" if t0 == 0.0 else "actor_train"
            recorder.add_activity(pid, cluster, rank, [gpu], "busy", stage, t0, t1)
    for pid, adapter, step, t0, t1, rollout_s in (("p0", "base", 0, 10.0, 50.0, 30.0),
                                                  ("p1", "a0", 0, 12.0, 70.0, 48.0),
                                                  ("p0", "base", 1, 52.0, 70.0, 13.0)):
        row = {"pipeline_id": pid, "adapter": adapter, "step": step, "t_start": t0, "t_end": t1,
               **{c: 0.0 for c in STAGE_COLUMNS}, "rollout_s": rollout_s, "reward_mean": 0.5}
        recorder.add_step(row)
    # One wait per applied grant, and a completed trajectory for every step trained, as the
    # event log has them (`rlix-sim check` holds the tables to it).
    for wait in (("p0", "actor_train", 0, 0.0, 0.0), ("p1", "actor_train", 0, 0.0, 0.0),
                 ("p0", "actor_train", 1, 40.0, 40.0), ("p1", "actor_train", 1, 60.0, 64.0),
                 ("p0", "actor_train", 1, 65.0, 65.0)):
        recorder.add_wait(*wait)
    recorder.add_rollouts({
        "pipeline_id": ["p0", "p0", "p0", "p1", "p1", "p0"],
        "adapter": ["base", "base", "base", "a0", "a0", "base"],
        "trajectory_id": [0, 1, 1, 0, 1, 2],
        "step_consumed": [0, 0, 0, 0, 0, 1],
        "weight_version": [0, 0, 0, 0, 0, 1],
        "prompt_tokens": [10, 10, 10, 20, 20, 10],
        "response_tokens": [100, 50, 300, 200, 400, 120],
        "t_start": [12.0, 12.0, 20.0, 14.0, 14.0, 54.0],
        "t_end": [30.0, 20.0, 38.0, 40.0, 58.0, 59.0],
        "preemptions": [0, 1, 1, 0, 0, 0],
        "status": ["completed", "requeued", "completed", "completed", "completed", "completed"],
        "dp_rank": [0, 1, 1, 2, 3, 0],
        "recomputed_tokens": [0, 0, 50, 0, 0, 0],
    })
