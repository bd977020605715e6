"""`rlix-sim demo`: the policy core at work on a bundled scenario, before the simulator lands.

Two pipelines share one node of 8 GPUs: an agentic one (long-tailed rollouts, from the bundled
`agentic_small` trace) and a math one (`math_small`). Each step's rollout work is the step's
total response tokens; every active rollout GPU generates `--tokens-per-gpu-s` tokens per
second; training takes a fixed time. The toy driver (`rlix.sim.toy_loop`) carries decisions
out one tick later; a rank generates only `--load-s` after it expands (loading weights), and
a shrink for another pipeline throws away `--preempt-loss-s` of that rank's in-flight work.
Those two costs are this demo's assumptions, not measurements; the simulator's cost model
replaces them. The demo prints the first decision rounds under the chosen policy, then the
makespan and GPU busy share of every policy on the same workload.
"""

from __future__ import annotations

import argparse
from typing import Any

from rlix.policy import POLICIES, ClusterSpec, PipelineKind, PipelineSpec, Scheduler, Topology
from rlix.policy.decisions import Expand, Grant, Hold, Shrink, describe
from rlix.sim.options import (
    UsageError,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from rlix.sim.toy_loop import Job, Loop
from rlix.traces import load_bundled

NUM_GPUS = 8
PIPELINES = (
    ("agentic", "agentic_small", (0, 1, 2, 3), PipelineKind.FULL_FINETUNE, ()),
    ("math", "math_small", (4, 5, 6, 7), PipelineKind.MULTI_LORA, ("algebra", "geometry")),
)


def scenario(num_steps: int, tokens_per_gpu_s: float) -> list[Job]:
    """Two pipelines on one node; rollout work per step from the bundled traces.

    Raises UsageError if a bundled trace holds fewer than `num_steps` steps (naming the most
    every pipeline can replay), or for a step count or throughput that is not positive.
    """
    if num_steps < 1 or not tokens_per_gpu_s > 0:
        raise UsageError(
            f"steps ({num_steps}) and tokens per GPU-second ({tokens_per_gpu_s}) must be positive"
        )
    per_step_tokens = {
        trace: load_bundled(trace).groupby("step")["response_tokens"].sum().tolist()
        for _, trace, *_ in PIPELINES
    }
    max_steps = min(len(tokens) for tokens in per_step_tokens.values())
    if num_steps > max_steps:
        shortest = min(per_step_tokens, key=lambda trace: len(per_step_tokens[trace]))
        raise UsageError(
            f"--steps {num_steps}: at most {max_steps}, the steps the bundled trace "
            f"{shortest!r} holds"
        )
    jobs = []
    for pid, trace, train, kind, adapters in PIPELINES:
        work_s = [tokens / tokens_per_gpu_s for tokens in per_step_tokens[trace][:num_steps]]
        spec = PipelineSpec(
            pid, kind,
            {"actor_infer": ClusterSpec(1, tuple(range(NUM_GPUS))), "actor_train": ClusterSpec(1, train)},
            adapters=adapters,
        )
        # The toy loop uses one work size per job: the mean over the steps replayed.
        jobs.append(Job(spec, num_steps=len(work_s), work=sum(work_s) / len(work_s), train_s=30.0))
    return jobs


def run(policy: str, args: argparse.Namespace) -> tuple[Loop, dict[str, float]]:
    jobs = scenario(args.steps, args.tokens_per_gpu_s)
    loop = Loop(Scheduler(Topology(1, NUM_GPUS), policy, check_invariants=True), jobs, dt_s=1.0,
                load_s=args.load_s, preempt_loss_s=args.preempt_loss_s)
    finished = loop.run(max_time_s=args.max_time_s)
    return loop, finished


def main(args: argparse.Namespace) -> int:
    loop, _ = run(args.policy, args)
    print(f"rlix policy demo: 2 pipelines share {NUM_GPUS} GPUs under '{args.policy}' "
          f"(invariants checked after every event)\n")
    shown = 0
    for now, decision in loop.log:
        if isinstance(decision, Grant | Expand | Shrink | Hold):
            if shown == args.show:
                print("  ...")
                break
            print(f"  t={now:7.1f}s  {describe(decision)}")
            shown += 1
    print(f"\n{'policy':<12}{'makespan_s':>12}{'gpu_busy_share':>16}{'decisions':>11}")
    for policy in sorted(POLICIES):
        other, finished = run(policy, args)
        if len(finished) < len(other.jobs):
            print(f"{policy:<12}{'unfinished':>12}  (stuck at t={other.now:.0f}s: "
                  f"{sorted(set(other.jobs) - set(finished))} never finished)")
            continue
        makespan = max(finished.values())
        share = other.busy_gpu_s / (NUM_GPUS * makespan)
        print(f"{policy:<12}{makespan:>12.1f}{share:>16.2f}{other.num_decisions:>11d}")
    return 0


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "demo",
        help="watch the policy core share 8 GPUs between two pipelines (bundled scenario)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--policy", choices=sorted(POLICIES), default="rlix", help="policy to trace (default rlix)")
    parser.add_argument("--steps", type=positive_int, default=4,
                        help="train steps per pipeline (default 4; at most 8, the steps of the bundled "
                        "math trace)")
    parser.add_argument("--tokens-per-gpu-s", type=positive_float, default=2500.0,
                        help="decode throughput of one rollout GPU (default 2500 tokens/s)")
    parser.add_argument("--load-s", type=non_negative_float, default=10.0,
                        help="seconds a rank loads weights before it generates (default 10)")
    parser.add_argument("--preempt-loss-s", type=non_negative_float, default=5.0,
                        help="seconds of a shrunk rank's work that start over (default 5)")
    parser.add_argument("--max-time-s", type=positive_float, default=20_000.0,
                        help="give up on a policy whose pipelines are not done by then (default 20000)")
    parser.add_argument("--show", type=non_negative_int, default=30,
                        help="decision lines to print (default 30)")
    parser.add_argument("--traceback", action="store_true",
                        help="on error, show the Python traceback (also: RLIX_DEBUG=1)")
    parser.set_defaults(run=main)
