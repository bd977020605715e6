"""Shorter versions of the bundled cpu-demo for tests that run `rlix-exec` end to end in a child
process and stop, kill or resume it: the same two pipelines on the same four declared GPUs, with
fewer steps and a checkpoint every two, so a test reaches its stop and its resume's end sooner."""

from __future__ import annotations

from pathlib import Path

import yaml

from rlix.scenarios import load_scenario

SHORT_DEMO_STEPS = 6


def short_demo_file(folder: Path) -> Path:
    """cpu-demo at `SHORT_DEMO_STEPS` steps per pipeline (per adapter), a checkpoint every 2, as
    a YAML file in `folder` (a child process reads it as a user's scenario file)."""
    data = load_scenario("cpu-demo").model_dump(mode="json", exclude_none=True)
    for pipeline in data["pipelines"]:
        pipeline["steps"] = SHORT_DEMO_STEPS
        pipeline["adapters"] = [{**adapter, "steps": SHORT_DEMO_STEPS} for adapter in pipeline.get("adapters", [])]
        if not pipeline["adapters"]:
            del pipeline["adapters"]
    data["executor"]["checkpoint_every"] = 2
    path = folder / "short-demo.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path
