"""`rlix-exec`: run a scenario on Ray, or kill a pipeline of a running one.

    rlix-exec run SCENARIO [--out DIR] [--address ADDR] [--quiet] [--policy NAME]
    rlix-exec kill PIPELINE_ID [--address ADDR]

`run` takes a bundled scenario name (e.g. cpu-demo) or a YAML file. Without `--address` Ray
starts locally with the scenario's GPUs declared (every listener on loopback); with it, the
run joins that cluster. A bad scenario, model, task or reward is one error line, before any
actor starts. The run folder (default `runs/exec-<scenario>-<time>`) holds the same tables as
a simulator run; `rlix-sim replay` reproduces its decisions.

`kill` reaches the orchestrator of the run (the last local one, or the cluster at `--address`)
and removes the pipeline: its actors are killed and confirmed dead, then its GPUs go back.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlix-exec", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a scenario on Ray")
    run.add_argument("scenario", help="bundled scenario name or YAML file")
    run.add_argument("--out", help="run folder (default runs/exec-<scenario>-<time>)")
    run.add_argument("--address", help="join this Ray cluster instead of starting one locally")
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    run.add_argument("--policy", help="override the scenario's policy")
    run.add_argument("--overwrite", action="store_true", help="replace an existing run folder")
    run.add_argument("--check-invariants", action="store_true", help="check the core's invariants after every event")
    kill = commands.add_parser("kill", help="kill a pipeline of the running scenario")
    kill.add_argument("pipeline_id")
    kill.add_argument("--address", help="the Ray cluster (default: the last local run)")
    args = parser.parse_args(argv)
    try:
        return run_command(args) if args.command == "run" else kill_command(args)
    except KeyboardInterrupt:
        print("rlix-exec: interrupted", file=sys.stderr)
        return 130


def _fail(message: str) -> int:
    print(f"rlix-exec: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 2


def run_command(args: argparse.Namespace) -> int:
    from rlix.executor.run import ExecutorInputError, execute, plan
    from rlix.scenarios import ScenarioError

    try:
        the_plan = plan(args.scenario, policy=args.policy)
    except (ScenarioError, ExecutorInputError) as exc:
        return _fail(str(exc))
    out = args.out or f"runs/exec-{the_plan.scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    from rlix.executor.session import SessionError

    try:
        result = execute(the_plan, out_dir=out, address=args.address, quiet=args.quiet,
                         check_invariants=args.check_invariants, overwrite=args.overwrite)
    except (ExecutorInputError, SessionError) as exc:
        return _fail(str(exc))
    _print_summary(result, the_plan.setups)
    return 1 if any(s["status"] == "failed" for s in result.status.values()) else 0


def _print_summary(result: Any, setups: list[Any]) -> None:
    print(f"\nrun folder: {result.out_dir}   wall time {result.wall_s:.1f} s")
    rewards: dict[str, list[float]] = {}
    for row in result.recorder.steps:
        if "reward_mean" in row:
            rewards.setdefault(row["pipeline_id"], []).append(float(row["reward_mean"]))
    for setup in setups:
        pid = setup.pipeline_id
        status = result.status.get(pid, {"status": "not started", "error": ""})
        r = rewards.get(pid, [])
        reward = f"reward {r[0]:.3f} -> {r[-1]:.3f}" if r else "no steps"
        error = f"  ({status['error']})" if status.get("error") else ""
        print(f"  {pid:<12} {status['status']:<9} {len(r):>3} steps  {reward}{error}")
    counts = result.snapshot.get("trajectories", {})
    print(f"  trajectories: {counts.get('completed', 0)} completed, "
          f"{sum(v for k, v in counts.items() if k != 'completed')} not")


def kill_command(args: argparse.Namespace) -> int:
    import ray

    from rlix.executor import session
    from rlix.executor.orchestrator import ORCHESTRATOR_NAME

    address = args.address or session.last_local_address()
    if address is None:
        return _fail("no local run found; give --address of the Ray cluster")
    try:
        session.start(num_gpus=0, address=address)
    except session.SessionError as exc:
        return _fail(str(exc))
    try:
        handle = ray.get_actor(ORCHESTRATOR_NAME, namespace=session.NAMESPACE)
    except ValueError:
        return _fail(f"no rlix orchestrator runs in the Ray cluster at {address}")
    try:
        result = ray.get(handle.kill_pipeline.remote(args.pipeline_id))
    except ray.exceptions.RayTaskError as exc:
        return _fail(str(exc.cause if exc.cause is not None else exc).splitlines()[0])
    print(f"pipeline {result['pipeline_id']}: {result['status']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
