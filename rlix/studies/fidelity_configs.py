"""The configs of the simulator's offline validation: cpu-demo as plain data (`scenario_data`;
its `engine:` section is the executor's), the unseen variants the calibrated
simulator must predict (`VARIANTS`) and the second calibration config (`SECOND_CALIBRATION`).
The runs and the comparison are in rlix.studies.fidelity.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

Variant = Callable[[dict[str, Any]], dict[str, Any]]


def _added_pipeline(data: dict[str, Any]) -> dict[str, Any]:
    ft2 = {**data["pipelines"][0], "id": "ft2", "home": "2-3",
           "clusters": {"actor_train": {"tp": 1, "gpus": "2-3"}, "actor_infer": {"tp": 1, "gpus": "2-3,0-1"}}}
    return {**data, "pipelines": [*data["pipelines"], ft2]}


def _two_gpus(data: dict[str, Any]) -> dict[str, Any]:
    ft, lora = (dict(p) for p in data["pipelines"])
    ft.update(home="0", clusters={"actor_train": {"tp": 1, "gpus": "0"}, "actor_infer": {"tp": 1, "gpus": "0-1"}})
    lora.update(home="1", clusters={"actor_train": {"tp": 1, "gpus": "1"}, "actor_infer": {"tp": 1, "gpus": "1,0"}})
    return {**data, "topology": {**data["topology"], "gpus_per_node": 2}, "pipelines": [ft, lora]}


def _staleness_one(data: dict[str, Any]) -> dict[str, Any]:
    ft, lora = (dict(p) for p in data["pipelines"])
    ft["max_staleness"] = 1
    lora["adapters"] = [{**a, "max_staleness": 1} for a in lora["adapters"]]
    return {**data, "pipelines": [ft, lora]}


def _static(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "policy": {**data["policy"], "name": "static"}}


def _three_gpus(data: dict[str, Any]) -> dict[str, Any]:
    ft, lora = (dict(p) for p in data["pipelines"])
    ft.update(home="0", clusters={"actor_train": {"tp": 1, "gpus": "0"}, "actor_infer": {"tp": 1, "gpus": "0-2"}})
    lora.update(home="1-2", clusters={"actor_train": {"tp": 1, "gpus": "1-2"},
                                      "actor_infer": {"tp": 1, "gpus": "1-2,0"}})
    return {**data, "topology": {**data["topology"], "gpus_per_node": 3}, "pipelines": [ft, lora]}


#: The second calibration config (not one of the unseen ones): cpu-demo on three declared GPUs,
#: so the calibration sees two run concurrencies and can fit the per-op slowdown across them
#: (rlix.sim.concurrency).
SECOND_CALIBRATION: dict[str, Variant] = {"three-gpus": _three_gpus}

#: The unseen configs: cpu-demo with a pipeline added, on two declared GPUs instead of four,
#: with staleness 1 everywhere, under the static policy.
VARIANTS: dict[str, Variant] = {
    "pipeline-added": _added_pipeline, "two-gpus": _two_gpus, "staleness-1": _staleness_one, "static": _static,
}


def _with_steps(data: dict[str, Any], steps: int) -> dict[str, Any]:
    pipelines = []
    for pipeline in data["pipelines"]:
        pipeline = {**pipeline, "steps": steps}
        if pipeline.get("adapters"):
            pipeline["adapters"] = [{**adapter, "steps": steps} for adapter in pipeline["adapters"]]
        pipelines.append(pipeline)
    return {**data, "pipelines": pipelines}


def scenario_data(variant: Variant | None, trace: Path | None = None,
                  costs: Path | dict[str, float] | None = None, steps: int | None = None,
                  executor: dict[str, Any] | None = None) -> dict[str, Any]:
    """cpu-demo as plain data, then `variant`; with
    `trace` and `costs`, the calibrated simulator's inputs; with `steps`, every pipeline (and
    adapter) cut to that many steps (a short check; None: cpu-demo's own); with `executor`,
    those settings of the `executor:` section replaced (the backend and model of a GPU run;
    the simulator ignores the section)."""
    from rlix.scenarios import load_scenario

    data = load_scenario("cpu-demo").model_dump(mode="json", exclude_none=True)
    if executor:
        data["executor"] = {**data.get("executor", {}), **executor}
    if variant is not None:
        data = variant(data)
    if steps is not None:
        data = _with_steps(data, steps)
    if trace is not None:
        ref = {"path": str(trace)}
        data["trace"] = ref
        for pipeline in data["pipelines"]:
            pipeline["trace"] = ref
            for adapter in pipeline.get("adapters", []):
                adapter["trace"] = ref
    if costs is not None:
        data["costs"] = dict(costs) if isinstance(costs, dict) else str(costs)
    return data


def gpus_needed(datas: list[dict[str, Any]]) -> int:
    """Most GPUs any of these configs declares (its topology's nodes x GPUs per node)."""
    return max(int(d["topology"]["num_nodes"]) * int(d["topology"]["gpus_per_node"]) for d in datas)
