"""The executor's own overhead, measured on a local Ray session (declared GPUs, no real GPU).

1. Request-to-grant latency: a driver asks the orchestrator for a gang cluster and gets the
   grant back (`Client.request`, one actor round trip with the core's round in between), then
   releases it; p50 / p99 over `--grants` requests.
2. Shrink and expand durations and weight sync per MB: a synthetic pipeline (timed stages,
   synthetic tokens, `--weight-mb` MB of weights through the object store) rolls out while a
   second one takes GPUs away; every expand is timed from its carry-out to its report (the run's
   record: allocations and the event log), shrinks by the orchestrator's actuator, and the
   pipeline records every weight load and sync. An expand is "cold" when its rank's worker
   process was started during it (the rank's engine was built, in a new process, between the
   expand's carry-out and its report: each engine notes when and where it was built), "warm"
   when it woke a worker that was already up. A pipeline's init starts every rank's worker
   (`PipelineSetup.prestart_workers`), so expands are warm unless a worker died and was
   replaced, or prestart_workers is off.
3. The cpu-demo scenario end to end (tiny Qwen2, hf backend): total wall time, and the share of
   it the declared GPUs were busy (a stage running or a rank generating) and held at all.

About a minute in all on two cores, half of it the cpu-demo run (`--skip-demo` leaves it out).

    .venv/bin/python bench/exec_overhead.py [--json] [--skip-demo] [--grants N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import Any

import ray

from rlix.executor import session
from rlix.executor.api import Client, start_orchestrator
from rlix.executor.synthetic import SyntheticWorkload
from rlix.executor.workers import Engine
from rlix.executor.workload import PipelineSetup
from rlix.pipelines import AdapterConfig, ProgramConfig
from rlix.policy import ClusterSpec, PipelineKind, PipelineSpec, Topology
from rlix.traces.options import positive_int, positive_number


class StartNotingWorkload(SyntheticWorkload):
    """The synthetic workload, whose rollout engine notes (a JSON line in `params["starts"]`)
    the wall time, pipeline and CUDA_VISIBLE_DEVICES of the worker process that built it:
    a worker builds its engine once, when its process starts. (Defined here, in __main__,
    so Ray ships it to the pipeline and worker processes by value.)"""

    def engine_factory(self) -> Callable[[], Engine]:
        build, path, pipeline_id = super().engine_factory(), str(self.params["starts"]), self.setup.pipeline_id

        def built() -> Engine:
            engine = build()
            line = {"pipeline": pipeline_id, "devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                    "t_wall": time.time()}
            with open(path, "a") as out:
                out.write(json.dumps(line) + "\n")
            return engine

        return built


def label_expands(event_lines: Iterable[str], allocations: Iterable[tuple[Any, ...]],
                  starts: Iterable[tuple[str, str, float]], devices_of: Callable[[tuple[int, ...]], str]
                  ) -> list[tuple[str, int, float, bool]]:
    """(pipeline, dp_rank, seconds from carry-out to report, cold) of every applied expand.
    Carry-out: the start of the rank's allocation row; report: the event that said applied;
    cold: a worker process on the rank's devices, of its pipeline, started (`starts`: pipeline,
    devices, run-clock seconds) between the two."""
    emitted: dict[int, tuple[str, int, tuple[int, ...]]] = {}
    reported: dict[int, float] = {}
    for line in event_lines:
        record = json.loads(line)
        if "event" not in record:
            continue  # the header
        event = record["event"]
        for decision in record["decisions"]:
            if decision["type"] == "Expand":
                emitted[decision["decision_id"]] = (decision["pipeline_id"], decision["dp_rank"],
                                                    tuple(decision["gpus"]))
        ids = {"DecisionApplied": [event.get("decision_id")], "DecisionsApplied": event.get("decision_ids", [])}
        for decision_id in ids.get(event["type"], []):
            reported.setdefault(decision_id, float(event["now"]))
    carried = sorted((row[0], row[3], float(row[5])) for row in allocations if row[1] == "actor_infer")
    out = []
    for decision_id, (pipeline_id, dp_rank, gpus) in sorted(emitted.items()):
        t_report = reported.get(decision_id)
        if t_report is None:
            continue  # failed, revoked or still loading: not an expand that happened
        t_carry = max((t for p, r, t in carried if (p, r) == (pipeline_id, dp_rank) and t <= t_report), default=None)
        if t_carry is None:
            continue
        devices = devices_of(gpus)
        cold = any(p == pipeline_id and d == devices and t_carry <= t <= t_report for p, d, t in starts)
        out.append((pipeline_id, dp_rank, t_report - t_carry, cold))
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def grant_latency(client: Client, num_grants: int) -> dict[str, float]:
    spec = PipelineSpec("bench-api", PipelineKind.FULL_FINETUNE,
                        {"actor_infer": ClusterSpec(1, (0, 1, 2, 3)), "actor_train": ClusterSpec(1, (0, 1))})
    client.register_pipeline(spec)
    client.admit_pipeline("bench-api")
    latencies = []
    for _ in range(num_grants + 10):
        t0 = time.perf_counter()
        client.request("bench-api", "actor_train", 1)
        latencies.append(time.perf_counter() - t0)
        client.release("bench-api", "actor_train")
    client.remove_pipeline("bench-api")
    ms = [x * 1e3 for x in latencies[10:]]  # the first calls warm up the actor's code paths
    return {"grant_p50_ms": percentile(ms, 0.5), "grant_p99_ms": percentile(ms, 0.99), "grant_max_ms": max(ms),
            "num_grants": num_grants}


def synthetic_moves(client: Client, weight_mb: float) -> dict[str, Any]:
    starts_file = tempfile.NamedTemporaryFile(prefix="rlix-worker-starts-", suffix=".jsonl", delete=False).name

    def setup(pid: str, train: tuple[int, ...], steps: int) -> PipelineSetup:
        spec = PipelineSpec(pid, PipelineKind.FULL_FINETUNE,
                            {"actor_infer": ClusterSpec(1, (0, 1, 2, 3)), "actor_train": ClusterSpec(1, train)})
        program = ProgramConfig(pid, PipelineKind.FULL_FINETUNE, (AdapterConfig("base", steps, 0),),
                                num_prompts=8, samples_per_prompt=2)
        params = {"weight_mb": weight_mb, "tokens_per_s": 100.0, "stage_s": 0.5, "starts": starts_file}
        return PipelineSetup(spec, program, StartNotingWorkload, params, max_batch_per_rank=4)

    t0 = time.monotonic()
    client.launch(setup("bench-a", (0, 1), 4))
    client.launch(setup("bench-b", (2, 3), 4))
    client.wait_done(600)
    wall_s = time.monotonic() - t0
    snapshot = client.snapshot()
    recorder = ray.get(client.handle.finish_run.remote())
    info = ray.get(client.handle.info.remote())
    shrinks = [d for kind, d in snapshot["decision_durations"] if kind == "shrink"]
    with open(starts_file) as lines:
        starts = [(s["pipeline"], s["devices"], s["t_wall"] - info["t0_wall"]) for s in map(json.loads, lines)]
    os.unlink(starts_file)
    expands = label_expands(recorder.event_lines, recorder.allocations, starts, info["pool"].visible_devices)
    warm = [seconds for *_key, seconds, cold in expands if not cold]
    cold = [seconds for *_key, seconds, cold in expands if cold]
    loads = [(t1 - t0_) for _p, _c, _r, _g, kind, stage, t0_, t1 in recorder.activity
             if kind == "loading" and stage in ("load", "sync")]
    return {
        "synthetic_wall_s": wall_s, "num_expands": len(expands), "num_shrinks": len(shrinks),
        "num_worker_starts": len(starts), "num_expands_cold": len(cold), "num_expands_warm": len(warm),
        "expand_warm_p50_ms": 1e3 * statistics.median(warm) if warm else None,
        "expand_cold_p50_s": statistics.median(cold) if cold else None,
        "expand_warm_max_ms": 1e3 * max(warm) if warm else None,
        "expand_cold_min_s": min(cold) if cold else None,
        "shrink_p50_ms": 1e3 * statistics.median(shrinks) if shrinks else None,
        "shrink_max_ms": 1e3 * max(shrinks) if shrinks else None,
        "weight_mb": weight_mb,
        "weight_load_ms_per_mb": 1e3 * statistics.median(loads) / weight_mb if loads else None,
    }


def cpu_demo() -> dict[str, Any]:
    from rlix.executor.live import execute
    from rlix.executor.run import plan

    the_plan = plan("cpu-demo")
    result = execute(the_plan, quiet=True)
    rec = result.recorder
    makespan = rec.end_s
    num_gpus = the_plan.topology.num_gpus
    busy = sum(t1 - t0 for _p, _c, _r, _g, kind, _s, t0, t1 in rec.activity if kind == "busy")
    held = sum(t1 - t0 for *_x, t0, t1 in rec.allocations)
    return {"cpu_demo_wall_s": result.wall_s, "cpu_demo_makespan_s": makespan,
            "cpu_demo_gpu_busy_share": busy / (num_gpus * makespan),
            "cpu_demo_gpu_held_share": held / (num_gpus * makespan),
            "cpu_demo_status": {pid: s["status"] for pid, s in result.status.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    parser.add_argument("--skip-demo", action="store_true", help="skip the cpu-demo run")
    parser.add_argument("--grants", type=positive_int, default=300, help="requests timed for the grant latency (default 300)")
    parser.add_argument("--weight-mb", type=positive_number, default=64.0,
                        help="MB of weights the synthetic pipeline moves (default 64)")
    args = parser.parse_args()
    session.start(num_gpus=4, num_cpus=2)
    handle = start_orchestrator(Topology(1, 4))
    client = Client(handle)
    results: dict[str, Any] = {"ray_version": ray.__version__}
    results.update(grant_latency(client, args.grants))
    results.update(synthetic_moves(client, args.weight_mb))
    ray.get(handle.shutdown.remote())
    ray.kill(handle)
    if not args.skip_demo:
        results.update(cpu_demo())
    session.stop()
    if args.json:
        print(json.dumps(results))
    else:
        for key, value in results.items():
            print(f"{key:>28}: {value:.3f}" if isinstance(value, float) else f"{key:>28}: {value}")


if __name__ == "__main__":
    main()
