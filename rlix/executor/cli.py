"""`rlix-exec`: run a scenario on Ray, resume a cut run, or kill a pipeline of a running one.

    rlix-exec run SCENARIO [--out DIR] [--overwrite] [--address ADDR] [--quiet] [--policy NAME]
    rlix-exec resume RUN_DIR [--address ADDR] [--quiet]
    rlix-exec kill PIPELINE_ID [--address ADDR]

`run` takes a bundled scenario name (e.g. cpu-demo) or a YAML file. Without `--address` Ray
starts locally with the scenario's GPUs declared (every listener on loopback, Ray's token
auth as Ray sets it); with it, the run joins that cluster. A bad scenario, model, task,
reward or output folder is one error line, before any actor starts. The run folder (default
`runs/exec-<scenario>-<time>`) holds the same tables as a simulator run; `rlix-sim replay`
reproduces its decisions. `--overwrite` replaces only a folder rlix wrote.

Ctrl-C or SIGTERM stops a run within seconds and writes the record so far (`summary.json`:
`finished: false` and why); so does the death of the orchestrator. `resume` continues such a
run, or one whose driver was killed outright, from each pipeline's newest checkpoint
(`checkpoint_every` in the scenario's `executor:` section) in the same folder. `summary.json`
gives each pipeline's final state (finished / failed / killed / stopped, with the reason) and
the faults the run survived. Of a scenario's faults the executor carries out `kill` only (lost GPUs and
failed decisions are the simulator's).

`kill` reaches the orchestrator of the run (the one on this machine, or the cluster at
`--address`) and removes the pipeline: its actors are killed and confirmed dead, then its GPUs
go back. With no run going it says so within seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any


def main(argv: Sequence[str] | None = None) -> int:
    from rlix.policy import POLICIES
    from rlix.traces.options import path_text

    parser = argparse.ArgumentParser(prog="rlix-exec", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run", help="run a scenario on Ray", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run SCENARIO's pipelines on Ray under its policy, training real models, and write its "
                    "run folder\n(the simulator's tables, plus the trained models under models/). Without "
                    "--address a local Ray\nstarts on loopback with the scenario's GPUs declared. With it, the "
                    "run joins that cluster: its\nnodes must hold the topology, no other rlix run may be going "
                    "there, and on several nodes --out\nmust be on a file system every node mounts at the same "
                    "path (all checked before the run).\nCtrl-C or SIGTERM stops it within seconds and writes "
                    "the record so far, which\n`rlix-exec resume` continues.",
        epilog="examples:\n  rlix-exec run cpu-demo --out runs/demo     # tiny models on CPU, 4 declared GPUs\n"
               "  rlix-exec run my.yaml --address HOST:6379  # join a running Ray cluster\n"
               "  rlix-sim check runs/demo && rlix-sim replay runs/demo")
    run.add_argument("scenario", help="bundled scenario name or YAML file")
    run.add_argument("--out", type=path_text,
                     help="run folder (default runs/exec-<scenario>-<time>); checked before the run starts")
    run.add_argument("--address", help="join the Ray cluster at HOST:PORT (its head's GCS port, 6379 by default) "
                                       "instead of starting one locally; it must have the topology's num_nodes "
                                       "nodes of gpus_per_node GPUs each, checked before any actor starts "
                                       "(default: $RAY_ADDRESS when set, as for Ray)")
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    run.add_argument("--policy", choices=sorted(POLICIES), help="override the scenario's policy")
    run.add_argument("--overwrite", action="store_true",
                     help="replace --out if it is a run folder rlix wrote (anything else is refused)")
    run.add_argument("--check-invariants", action="store_true", help="check the core's invariants after every event")
    resume = commands.add_parser(
        "resume", help="continue a cut run from its pipelines' last checkpoints",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Continue a run cut by Ctrl-C, SIGTERM, its orchestrator's death or SIGKILL of its driver, "
                    "in the\nsame folder: each pipeline that was running starts again from its newest "
                    "checkpoint, ended ones\nstay ended, later arrivals arrive on time. A finished run, a "
                    "folder that is not a live run, or a\ndriver still running is refused in one line, "
                    "nothing changed.",
        epilog="example:\n  rlix-exec run cpu-demo --out runs/demo     # then Ctrl-C\n"
               "  rlix-exec resume runs/demo")
    resume.add_argument("run_dir", help="the run folder (written or not: a SIGKILLed run leaves .RUN_DIR.live)")
    resume.add_argument("--address", help="join the Ray cluster at HOST:PORT instead of starting one locally (a "
                                          "run cut on a cluster is resumed with its --address; checked as run checks "
                                          "it; default: $RAY_ADDRESS when set)")
    resume.add_argument("--quiet", action="store_true", help="no progress bars")
    resume.add_argument("--check-invariants", action="store_true", help="check the core's invariants after every event")
    kill = commands.add_parser(
        "kill", help="kill a pipeline of the running scenario", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Remove one pipeline from the run going on this machine (or the Ray cluster at "
                    "--address): its\nactors are killed and confirmed dead, then its GPUs go back to "
                    "the others. Its state in\nsummary.json is `killed`. With no run going it says so "
                    "within seconds.",
        epilog="example (from another shell while `rlix-exec run cpu-demo` runs):\n  rlix-exec kill ft")
    kill.add_argument("pipeline_id", help="the pipeline's id in the scenario (e.g. ft)")
    kill.add_argument("--address", help="the Ray cluster (default: the run on this machine)")
    args = parser.parse_args(argv)
    missing = _missing_extra()
    if missing:
        return _fail(f"the executor needs {missing}, which is not installed: "
                     f"pip install torch=={TORCH_CPU} && pip install 'rlix[exec]' (on NVIDIA GPUs: 'rlix[gpu]')")
    if args.command in ("run", "resume") and args.address is None and os.environ.get("RAY_ADDRESS"):
        # Ray's own default: a driver given RAY_ADDRESS (`ray job submit` sets it) joins that cluster.
        args.address = os.environ["RAY_ADDRESS"]
        print(f"rlix-exec: joining the Ray cluster at {args.address} (RAY_ADDRESS; unset it to start Ray "
              "locally)", file=sys.stderr)
    try:
        command = {"run": run_command, "resume": resume_command, "kill": kill_command}[args.command]
        return command(args)
    except KeyboardInterrupt:
        print("rlix-exec: interrupted", file=sys.stderr)
        return 130


#: The CPU build of torch the `exec` extra pins (an unpinned torch is a multi-GB CUDA build).
TORCH_CPU = "2.13.0"


def _missing_extra() -> str | None:
    """The first package of the executor's extra that cannot be imported, if any."""
    import importlib.util

    for module in ("ray", "psutil", "torch", "transformers", "peft"):
        if importlib.util.find_spec(module) is None:
            return module
    return None


def _fail(message: str) -> int:
    print(f"rlix-exec: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 2


def run_command(args: argparse.Namespace) -> int:
    from rlix.executor.live import execute
    from rlix.executor.run import ExecutorInputError, plan
    from rlix.executor.session import SessionError
    from rlix.runs.errors import RunError
    from rlix.scenarios import ScenarioError

    try:
        the_plan = plan(args.scenario, policy=args.policy)
        out = args.out or f"runs/exec-{the_plan.scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        # execute() checks `out` before Ray starts, not after hours of training.
        result = execute(the_plan, out_dir=out, address=args.address, quiet=args.quiet,
                         check_invariants=args.check_invariants, overwrite=args.overwrite)
    except (ScenarioError, ExecutorInputError, SessionError, RunError) as exc:
        return _fail(str(exc))
    return _report(result, [s.pipeline_id for s in the_plan.setups])


def resume_command(args: argparse.Namespace) -> int:
    from rlix.executor.live import execute
    from rlix.executor.resume import ResumeError, prepare_resume
    from rlix.executor.run import ExecutorInputError
    from rlix.executor.session import SessionError
    from rlix.runs.errors import RunError

    try:
        if args.address is not None:  # before the run's files are touched
            from rlix.executor.session import check_reachable

            check_reachable(args.address)
        the_plan, cut = prepare_resume(args.run_dir)
        result = execute(the_plan, out_dir=args.run_dir, address=args.address, quiet=args.quiet,
                         check_invariants=args.check_invariants, cut=cut)
    except (ResumeError, ExecutorInputError, SessionError, RunError) as exc:
        return _fail(str(exc))
    return _report(result, [s.pipeline_id for s in the_plan.setups])


def _report(result: Any, pipeline_ids: list[str]) -> int:
    """The run's summary lines; its exit status (0 finished, 1 a pipeline failed or the run
    was cut by a failure, 130 stopped by a signal)."""
    _print_summary(result, pipeline_ids)
    if result.write_error:
        print(f"rlix-exec: error: could not write {result.write_error}; the run is in {result.out_dir}",
              file=sys.stderr)
        return 1
    if not result.finished:
        print(f"rlix-exec: {result.stop_reason}; the record so far is in {result.out_dir}", file=sys.stderr)
        return 130 if result.by_signal else 1
    return 1 if any(s["status"] == "failed" for s in result.status.values()) else 0


def _print_summary(result: Any, pipeline_ids: list[str]) -> None:
    print(f"\nrun folder: {result.out_dir}   wall time {result.wall_s:.1f} s")
    for fault in result.faults:
        print(f"  survived at {fault['t_s']:.1f} s: {fault['pipeline_id']} {fault['detail']}")
    rewards: dict[str, list[float]] = {}
    for row in result.recorder.steps:
        if "reward_mean" in row:
            rewards.setdefault(row["pipeline_id"], []).append(float(row["reward_mean"]))
    for pid in dict.fromkeys([*result.status, *pipeline_ids]):
        status = result.status.get(pid, {"status": "not started", "error": ""})
        r = rewards.get(pid, [])
        reward = f"reward {r[0]:.3f} -> {r[-1]:.3f}" if r else "no steps"
        error = f"  ({status['error']})" if status.get("error") else ""
        print(f"  {pid:<12} {status['status']:<9} {len(r):>3} steps  {reward}{error}")
    print(f"  trajectories: {trajectory_counts(result.recorder.rollouts['status'])}")


def trajectory_counts(statuses: list[str]) -> str:
    """The run's trajectory attempts by how they ended: completed; cut short by a shrink or a
    dead worker and re-queued (finished elsewhere); ended with their pipeline or the run
    (aborted, or still in flight at a stop)."""
    completed = sum(1 for status in statuses if status == "completed")
    requeued = sum(1 for status in statuses if status == "requeued")
    text = f"{completed} completed; {requeued} attempts cut short and re-queued"
    ended = len(statuses) - completed - requeued
    return text + (f"; {ended} ended with their pipeline or the run" if ended else "")


def kill_command(args: argparse.Namespace) -> int:
    """Reach the run's orchestrator and kill one pipeline; answer within seconds either way.

    The connection runs in a helper thread: Ray's client can block in C for minutes on an
    address whose cluster is gone, where Python's Ctrl-C handler never runs. The main thread
    only waits, so Ctrl-C and the deadline always work.
    """
    import signal
    import threading

    from rlix.executor import session

    # Ctrl-C must work even when this process was started with SIGINT ignored (from a script).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    local = session.running_local_run()
    address = args.address or (local.address if local is not None else None)
    if address is None:
        return _fail("no running rlix run on this machine (for a run on another Ray cluster, give its --address)")
    problem = session.address_problem(address)
    if problem is not None:
        return _fail(f"no running rlix run at {address}: {problem}")
    auth_mode = local.auth_mode if local is not None and local.address == address else None
    outcome: dict[str, Any] = {}
    worker = threading.Thread(target=_kill_remote, args=(address, auth_mode, args.pipeline_id, outcome),
                              daemon=True)
    worker.start()
    worker.join(KILL_TIMEOUT_S)
    if worker.is_alive():
        return _fail(f"the Ray cluster at {address} did not answer within {KILL_TIMEOUT_S:.0f} s")
    if "failure" in outcome or "status" not in outcome:
        return _fail(outcome.get("failure", "the kill gave no answer"))
    if outcome.get("ended_before"):
        why = f" ({outcome['error']})" if outcome.get("error") else ""
        print(f"pipeline {outcome['pipeline_id']}: had already ended, {outcome['status']}{why}; nothing to kill")
    else:
        print(f"pipeline {outcome['pipeline_id']}: {outcome['status']}")
    return 0


#: How long `kill` waits for the cluster (joining takes ~2-5 s on a loaded 2-core machine).
KILL_TIMEOUT_S = 60.0


def _kill_remote(address: str, auth_mode: str | None, pipeline_id: str, outcome: dict[str, Any]) -> None:
    import ray

    from rlix.executor import session
    from rlix.executor.orchestrator import ORCHESTRATOR_NAME

    try:
        session.start(num_gpus=0, address=address, auth_mode=auth_mode, quiet=True)
        try:
            handle = ray.get_actor(ORCHESTRATOR_NAME, namespace=session.NAMESPACE)
        except ValueError:
            outcome["failure"] = f"no rlix run in the Ray cluster at {address} (no orchestrator)"
            return
        outcome.update(ray.get(handle.kill_pipeline.remote(pipeline_id)))
    except session.SessionError as exc:
        outcome["failure"] = str(exc)
    except ray.exceptions.RayTaskError as exc:
        cause = exc.cause if exc.cause is not None else exc
        if isinstance(cause, SystemExit | KeyboardInterrupt):  # the orchestrator was shut down meanwhile
            outcome["failure"] = "the run ended before the kill was confirmed"
            return
        # KeyError's str() is the repr of its message: take the message itself.
        message = cause.args[0] if isinstance(cause, KeyError) and cause.args else str(cause)
        outcome["failure"] = str(message).splitlines()[0]
    except ray.exceptions.RayActorError:
        outcome["failure"] = "the run's orchestrator is gone (the run is ending or ended)"
    except ray.exceptions.AuthenticationError:
        outcome["failure"] = (f"the Ray cluster at {address} uses token authentication and no token was "
                              "found (~/.ray/auth_token, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH)")
    except Exception as exc:  # noqa: BLE001 - whatever Ray raises, one line, not a thread's traceback
        outcome["failure"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


if __name__ == "__main__":
    sys.exit(main())
