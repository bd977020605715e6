"""Smaller versions of the bundled cpu-demo for the executor's live tests, on two declared GPUs
(half the rollout workers of the demo's four, and each worker process spends seconds of CPU
importing torch and transformers at start): `small_demo` (4 steps) as scenario data, and
`short_demo_file` (fewer steps than the demo, a checkpoint every two) as a file for tests that
run `rlix-exec` in a child process and stop, kill or resume it. Both keep the demo's sharing:
each pipeline trains on its own GPU and rolls out on both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rlix.scenarios import load_scenario

SHORT_DEMO_STEPS = 6


def two_gpu_demo(steps: int) -> dict[str, Any]:
    """cpu-demo on two declared GPUs (one node), `steps` steps per pipeline and per adapter."""
    data = load_scenario("cpu-demo").model_dump(mode="json", exclude_none=True)
    ft, lora = data["pipelines"]
    ft.update(home="0", steps=steps, clusters={"actor_train": {"tp": 1, "gpus": "0"}, "actor_infer": {"tp": 1, "gpus": "0-1"}})
    lora.update(home="1", steps=steps, clusters={"actor_train": {"tp": 1, "gpus": "1"}, "actor_infer": {"tp": 1, "gpus": "1,0"}})
    lora["adapters"] = [{**adapter, "steps": steps} for adapter in lora["adapters"]]
    data["topology"]["gpus_per_node"] = 2
    return data


def short_demo_file(folder: Path) -> Path:
    """The two-GPU demo at `SHORT_DEMO_STEPS` steps, a checkpoint every 2, as a YAML file in
    `folder` (a child process reads it as a user's scenario file)."""
    data = two_gpu_demo(SHORT_DEMO_STEPS)
    data["executor"]["checkpoint_every"] = 2
    path = folder / "short-demo.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def small_demo(trace: Path | None = None, costs: Path | None = None) -> dict[str, Any]:
    """The two-GPU demo at 4 steps, the engine said as the executor runs it."""
    data = two_gpu_demo(4)
    data["engine"] = {**data.get("engine", {}), "max_batch": 8, "balance": False, "migrate_on_expand": False}
    if trace is not None:
        for pipeline in data["pipelines"]:
            pipeline["trace"] = {"path": str(trace)}
            for adapter in pipeline.get("adapters", []):
                adapter["trace"] = {"path": str(trace)}
    if costs is not None:
        data["costs"] = str(costs)
    return data
