"""RLix's own rollout planner, run stand-alone on situations read as JSON lines (one per line).

Run by bench/rlix_differential.py in a process of its own, because RLix's package is also
called `rlix`: this process imports RLix's `rlix.scheduler.planner` from the checkout given on
the command line (its package `__init__`, which starts RLix's Ray client, is bypassed), never
this repository's `rlix`. For each situation it builds what RLix's scheduling cycle hands the
planner (pipeline registry, active allocations, idle GPUs, the pending rollout requests and
their estimates, progress totals), calls `snapshot_generation_dp_workers` and
`plan_generation_gap_ratio`, and prints `{"active": {pipeline: [dp ranks]}}` (one line each).

    python bench/rlix_planner_side.py RLIX_CHECKOUT < situations.jsonl
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import types
from pathlib import Path
from typing import Any


def import_planner(checkout: Path) -> tuple[Any, Any, Any]:
    """RLix's planner, types and protocol modules, from `checkout`."""
    package = types.ModuleType("rlix")
    package.__path__ = [str(checkout / "rlix")]  # a bare package: its __init__ is not run
    sys.modules["rlix"] = package
    # By name, at run time: these are RLix's modules, not this repository's (same package name).
    modules = ("rlix.scheduler.planner", "rlix.scheduler.types", "rlix.protocol.types")
    planner, sched_types, protocol = (importlib.import_module(name) for name in modules)
    return planner, sched_types, protocol


def plan(situation: dict[str, Any], planner: Any, st: Any, protocol: Any) -> dict[str, list[int]]:
    """One situation through RLix's planner: each pipeline's active dp ranks afterwards."""
    gen, train = protocol.GENERATION_CLUSTER_NAME, protocol.ACTOR_TRAIN_CLUSTER_NAME
    priority = protocol.Priority
    registry: dict[str, dict[str, Any]] = {}
    allocations: dict[str, Any] = {}
    pending: list[Any] = []
    totals: dict[str, tuple[float, float]] = {}
    held: set[int] = set()
    non_gen: set[int] = set()
    for p in situation["pipelines"]:
        pid, tp, mapping = p["id"], p["tp"], p["rollout"]
        registry[pid] = {"cluster_configs": {gen: {"tp_size": tp, "device_mapping": list(mapping)},
                                             train: {"tp_size": 1, "device_mapping": list(p["train"])}}}
        if p["holds_train"]:
            allocations[f"{pid}_{train}"] = st.ClusterAllocation(f"{pid}_{train}", list(p["train"]),
                                                                 priority.ACTOR_TRAINING)
            non_gen |= set(p["train"])
        if p["state"] in ("reported", "silent"):  # RLix: the rollout allocation exists
            gpus = [g for r in p["active"] for g in mapping[r * tp:(r + 1) * tp]]
            held |= set(gpus)
            allocations[f"{pid}_{gen}"] = st.ClusterAllocation(
                f"{pid}_{gen}", gpus, priority.GENERATION, active_dp_ranks=set(p["active"]))
        if p["state"] == "pending":
            request = st.Request(f"{pid}_{gen}", priority.GENERATION, 0.0)
            pending.append(st.PendingRequest(request, asyncio.Event(), step_target_estimate=p["estimate"]))
        totals[pid] = (float(p["remaining"]), float(p["total"])) if p["state"] == "reported" else (0.0, 0.0)
    idle = set(range(situation["num_gpus"])) - held - non_gen
    execution = st.ExecutionPlan()
    active, inactive, idle = planner.snapshot_generation_dp_workers(
        plan=execution, idle_gpus=idle, pipeline_registry=registry, active_allocations=allocations)
    planner.plan_generation_gap_ratio(
        execution, active_dp_workers=active, inactive_dp_workers=inactive, non_gen_reserved_gpus=non_gen,
        idle_gpus=idle, pipeline_registry=registry, active_allocations=allocations, pending_bucket_gen=pending,
        progress_totals_fn=lambda pipeline_id: totals[pipeline_id])
    return {pid: sorted(w.dp_rank for w in workers) for pid, workers in active.items()}


def main() -> None:
    checkout = Path(sys.argv[1])
    planner, st, protocol = import_planner(checkout)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            print(json.dumps({"active": plan(json.loads(line), planner, st, protocol)}))
        except Exception as exc:  # RLix raises on its own limits: report it for this situation
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))


if __name__ == "__main__":
    main()
