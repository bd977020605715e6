"""A small valid scenario as YAML text, for tests that break one thing at a time."""

from __future__ import annotations

import pytest

# Two nodes of 4 GPUs: p0 (full finetune) at home on node 0, p1 (multi-LoRA) on node 1, each
# allowed to roll out on both nodes.
BASE = """\
name: base
topology: {num_nodes: 2, gpus_per_node: 4}
trace: {bundled: math_small}
pipelines:
  - id: p0
    kind: full_finetune
    model: 7b
    home: 0-3
    clusters:
      actor_train: {tp: 1, gpus: 0-3}
      actor_infer: {tp: 2, gpus: 0-7}
    prompts_per_step: 4
    samples_per_prompt: 2
    steps: 2
    arrival_s: 10
  - id: p1
    kind: multi_lora
    model: 7b
    home: 4-7
    clusters:
      actor_train: {tp: 1, gpus: 4-7}
      actor_infer: {tp: 2, gpus: "4-7,0-3"}
    prompts_per_step: 4
    samples_per_prompt: 2
    steps: 2
    adapters:
      - {name: a0}
      - {name: a1, max_staleness: 1}
"""


@pytest.fixture
def base_yaml() -> str:
    return BASE
