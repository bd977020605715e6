"""The README's own scenario: a user writing one from the README alone needs every key's name,
which the README otherwise only paraphrases ("prompts x samples per step", "arrival")."""

from __future__ import annotations

import re
from pathlib import Path

from rlix.scenarios import parse_scenario
from rlix.scenarios.pipelines import PipelineConfig

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> str:
    found = re.search(r"```yaml\n(name: my-pool\b.*?)```", README.read_text(), re.S)
    assert found, "README.md has no example scenario (a ```yaml block starting `name: my-pool`)"
    return found.group(1)


def test_the_readme_scenario_loads_and_names_every_pipeline_field() -> None:
    scenario = parse_scenario(_example(), file="README.md")
    assert {p.kind for p in scenario.pipelines} == {"full_finetune", "multi_lora"}
    written = set(re.findall(r"^\s+-? ?([a-z_]+):", _example(), re.M))
    assert set(PipelineConfig.model_fields) - {"trace"} <= written
