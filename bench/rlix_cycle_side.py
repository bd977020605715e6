"""RLix's own scheduling cycle, run stand-alone on situations read as JSON lines (one per line).

Not a benchmark to run by hand: bench/rlix_differential.py writes the situations and reads the
answers (run that one: `python bench/rlix_differential.py --rlix RLIX_CHECKOUT`).

Run by bench/rlix_differential.py in a process of its own, because RLix's package is also
called `rlix`: this process imports RLix's `rlix.scheduler` modules from the checkout given on
the command line (its package `__init__`, which starts RLix's Ray client, is bypassed), never
this repository's `rlix`. For each situation it fills an instance of RLix's `SchedulerImpl`
with the state its cycle reads (pipeline registry, active allocations with their dp ranks, idle
GPUs, the pending requests of every priority in FIFO order, the rollout requests' estimates,
progress totals) and runs one `scheduling_cycle`: planned releases, the requests of priorities
0-5 with the rollout ranks they preempt, the gap-ratio split, validation and commit. Only its
calls out are replaced: the resize calls to pipelines' coordinators (there are none) and the
shutdown of its Ray cluster when a cycle fails (the error is printed instead). It prints
`{"active": {pipeline: [dp ranks]}, "granted": [pipelines whose actor_train was granted],
"cpu_s": the cycle's CPU time}`.

    python bench/rlix_cycle_side.py RLIX_CHECKOUT < situations.jsonl   # as rlix_differential.py runs it

Run by hand without a checkout or without situations on its input, or with --help, it says what
it is in one line (exit 2; 0 for --help) instead of importing anything.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import time
import types
from pathlib import Path
from typing import Any, NoReturn

#: RLix's scheduler module, inside a checkout (bench/rlix_differential.py checks the same file).
SCHEDULER = "rlix/scheduler/scheduler.py"
WHAT = ("rlix_cycle_side.py runs RLix's own scheduling cycle on situations read as JSON lines; it is "
        "an internal helper that bench/rlix_differential.py runs (python bench/rlix_differential.py "
        "--rlix RLIX_CHECKOUT), not a benchmark to run by hand")


def import_scheduler(checkout: Path) -> tuple[Any, Any, Any]:
    """RLix's scheduler, types and protocol modules, from `checkout`."""
    package = types.ModuleType("rlix")
    package.__path__ = [str(checkout / "rlix")]  # a bare package: its __init__ is not run
    sys.modules["rlix"] = package
    # By name, at run time: these are RLix's modules, not this repository's (same package name).
    modules = ("rlix.scheduler.scheduler", "rlix.scheduler.types", "rlix.protocol.types")
    scheduler, sched_types, protocol = (importlib.import_module(name) for name in modules)
    return scheduler, sched_types, protocol


def cycle(situation: dict[str, Any], scheduler: Any, st: Any, protocol: Any) -> dict[str, Any]:
    """One situation through a whole cycle of RLix's scheduler (`SchedulerImpl.scheduling_cycle`:
    planned releases, requests of priorities 0-5 with their preemptions, the gap-ratio split,
    validation, commit), its resize calls to pipelines left out: each pipeline's active dp ranks
    afterwards, the non-rollout clusters granted, and the cycle's CPU time."""
    gen, train = protocol.GENERATION_CLUSTER_NAME, protocol.ACTOR_TRAIN_CLUSTER_NAME
    priority = protocol.Priority
    impl = type("Probe", (scheduler.SchedulerImpl,), {})()  # not slotted: its calls out can be replaced
    state = impl._state
    totals: dict[str, tuple[float, float]] = {}
    held: set[int] = set()
    for p in situation["pipelines"]:
        pid, tp, mapping = p["id"], p["tp"], p["rollout"]
        state.pipeline_registry[pid] = {"cluster_configs": {
            gen: {"tp_size": tp, "device_mapping": list(mapping)},
            train: {"tp_size": 1, "device_mapping": list(p["train"])}}}
        if p["holds_train"]:
            state.active_allocations[f"{pid}_{train}"] = st.ClusterAllocation(
                f"{pid}_{train}", list(p["train"]), priority.ACTOR_TRAINING)
            held |= set(p["train"])
        if p["state"] in ("reported", "silent", "releasing"):
            bundles = {r: list(mapping[r * tp:(r + 1) * tp]) for r in p["active"]}
            gpus = sorted(g for b in bundles.values() for g in b)
            held |= set(gpus)
            state.active_allocations[f"{pid}_{gen}"] = st.ClusterAllocation(
                f"{pid}_{gen}", gpus, priority.GENERATION, active_dp_ranks=set(p["active"]), dp_rank_to_gpus=bundles)
        if p["state"] == "releasing":  # its step's batch is in: progress cleared, all ranks to go
            state.pending_planned_release_requests[f"{pid}_{gen}"] = st.PendingPlannedReleaseRequest(
                f"{pid}_{gen}", sorted(p["active"]), asyncio.Event())
        if p["state"] == "pending":
            request = st.Request(f"{pid}_{gen}", priority.GENERATION, 0.0)
            state.pending_bucket(priority.GENERATION).append(
                st.PendingRequest(request, asyncio.Event(), step_target_estimate=p["estimate"]))
        totals[pid] = (float(p["remaining"]), float(p["total"])) if p["state"] == "reported" else (0.0, 0.0)
    for index, r in enumerate(situation.get("requests", [])):  # FIFO within a priority
        request = st.Request(f"{r['pipeline']}_{train}", priority(r["priority"]), float(index))
        state.pending_bucket(priority(r["priority"])).append(st.PendingRequest(request, asyncio.Event()))
    state.idle_gpus = set(range(situation["num_gpus"])) - held
    impl._num_gpus = situation["num_gpus"]
    impl._required_gpus_per_node = situation["gpus_per_node"]
    impl._topology_ready.set()
    impl._pipeline_progress_totals_locked = lambda *, pipeline_id: totals[pipeline_id]
    impl._prepare_resize_calls_locked = lambda plan: []  # no pipelines to call

    async def no_resizes(*args: Any, **kwargs: Any) -> None:
        return None

    impl._execute_resize_calls = no_resizes
    impl._fail_fast_shutdown = no_resizes  # RLix would stop its Ray cluster; the error is reported

    async def timed_cycle() -> float:
        start_s = time.process_time()
        await impl.scheduling_cycle()
        return time.process_time() - start_s

    cpu_s = asyncio.run(timed_cycle())
    active = {p["id"]: sorted(a.active_dp_ranks) if (a := state.active_allocations.get(f"{p['id']}_{gen}")) else []
              for p in situation["pipelines"]}
    # Only pipelines not holding actor_train ask for it, so holding it now means granted.
    granted = sorted(r["pipeline"] for r in situation.get("requests", [])
                     if f"{r['pipeline']}_{train}" in state.active_allocations)
    return {"active": active, "granted": granted, "cpu_s": cpu_s}


def refuse(reason: str) -> NoReturn:
    print(f"{WHAT}: {reason}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    args = sys.argv[1:]
    if any(arg in ("-h", "--help") for arg in args):
        print(f"{WHAT}.")
        sys.exit(0)
    if len(args) != 1:
        refuse("it takes one argument, the RLix checkout")
    checkout = Path(args[0])
    if not (checkout / SCHEDULER).is_file():
        refuse(f"{checkout} is not an RLix checkout (no {SCHEDULER})")
    if sys.stdin.isatty():
        refuse("it reads the situations on its standard input, not from a terminal")
    scheduler, st, protocol = import_scheduler(checkout)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            print(json.dumps(cycle(json.loads(line), scheduler, st, protocol)))
        except Exception as exc:  # RLix raises on its own limits: report it for this situation
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))


if __name__ == "__main__":
    main()
