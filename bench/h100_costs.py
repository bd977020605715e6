"""The simulator's default H100 cost model set against the published figures it should reproduce.

No GPU is needed: every figure here is the cost model's (rlix.sim.costs), next to the
published one from ../shared/WORKLOADS.md. Three kinds of rows:

- fitted: Vidur's H100 profile of Llama-2-7B linear layers at TP1 and its TP2 floor are the
  cost model's inputs, so these rows only check that the model reproduces what it was fitted on;
- predicted: points the fit never saw (Vidur's TP8 floor of Llama-2-7B, Llama-2-70B at TP8);
- end to end: offline generation throughput of Llama-3.1-8B on one H100 through the
  simulator's own rollout engine (continuous batching, KV-cache limit, vLLM's 256 sequences),
  against vLLM 0.10's ~5,777 output tokens/s. The published figure is FP8 and its prompt and
  output lengths are not given; the model is BF16, so its weight reads are twice the FP8
  ones and it should come out lower, not equal. It is run for a few (prompt, output) shapes.

    python bench/h100_costs.py            # the table (a few seconds)
    python bench/h100_costs.py --json     # one JSON line: {"rows": [...]}
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from rlix.scenarios.models import ModelShape
from rlix.sim.costs import VIDUR_LLAMA2_7B_TP1_S, CostModel
from rlix.sim.engine import RolloutGroup

# Published configs (huggingface.co meta-llama/*/config.json): params, layers, hidden, heads,
# KV heads, head dim, MLP, vocab.
LLAMA2_7B = ModelShape("llama-2-7b", 6.74e9, 32, 4096, 32, 32, 128, 11_008, 32_000)
LLAMA2_70B = ModelShape("llama-2-70b", 69.0e9, 80, 8192, 64, 8, 128, 28_672, 32_000)
LLAMA31_8B = ModelShape("llama-3.1-8b", 8.03e9, 32, 4096, 32, 8, 128, 14_336, 128_256)

#: vLLM's default max_num_seqs.
VLLM_MAX_SEQS = 256
#: WORKLOADS.md: Llama-3.1-8B FP8 on vLLM 0.10, offline, one H100.
PUBLISHED_OFFLINE_TOKENS_PER_S = 5_777.0
SHAPES = ((128, 128), (512, 512), (1024, 1024), (256, 2048))


def linear_rows() -> list[dict]:
    """Linear layers of one forward pass, cost model against Vidur's profile."""
    llama7 = CostModel.for_model(LLAMA2_7B)
    llama70 = CostModel.for_model(LLAMA2_70B)
    rows = [
        _row(f"Llama-2-7B linear layers, TP1, {n} tokens", "fitted", llama7.linear_seconds(n, 1), published)
        for n, published in VIDUR_LLAMA2_7B_TP1_S
    ]
    rows.append(_row("Llama-2-7B linear floor, TP2", "fitted", llama7.linear_seconds(1, 2), 3.2e-3))
    rows.append(_row("Llama-2-7B linear floor, TP8", "predicted", llama7.linear_seconds(1, 8), 1.3e-3))
    rows.append(_row("Llama-2-70B linear floor, TP8", "predicted", llama70.linear_seconds(1, 8), 8.4e-3))
    return rows


def _row(name: str, kind: str, model_s: float, published_s: float) -> dict:
    return {
        "name": name, "kind": kind, "unit": "ms", "model": model_s * 1e3, "published": published_s * 1e3,
        "error": abs(model_s - published_s) / published_s,
    }


def offline_tokens_per_s(prompt: int, output: int, num_requests: int = 1000) -> float:
    """Output tokens per second of `num_requests` identical requests queued at once on one
    engine of the simulator (what vLLM's offline throughput benchmark does)."""
    costs = CostModel.for_model(LLAMA31_8B)
    group = RolloutGroup(costs, 1, VLLM_MAX_SEQS, costs.kv_capacity_tokens(1))
    ids = np.arange(num_requests, dtype=np.int64)
    group.submit(ids, np.full(num_requests, prompt, np.int64), np.full(num_requests, output, np.int64),
                 np.zeros(num_requests, np.int64))
    group.add_engine(0, 0.0)
    end = 0.0
    while group.num_remaining:
        end, _ = group.advance(float("inf"))
    return num_requests * output / end


def throughput_rows() -> list[dict]:
    rows = []
    for prompt, output in SHAPES:
        model = offline_tokens_per_s(prompt, output)
        published = PUBLISHED_OFFLINE_TOKENS_PER_S
        rows.append({"name": f"Llama-3.1-8B offline, one H100, {prompt} in / {output} out (BF16; published: FP8)",
                     "kind": "end to end", "unit": "tok/s", "model": model, "published": published,
                     "error": abs(model - published) / published})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="one JSON line")
    args = parser.parse_args(argv)
    rows = linear_rows() + throughput_rows()
    if args.json:
        print(json.dumps({"rows": rows}))
        return 0
    print(f"{'':72s} {'kind':10s} {'model':>9s} {'published':>9s} {'error':>6s}")
    for row in rows:
        print(f"{row['name']:72s} {row['kind']:10s} {row['model']:9.1f} {row['published']:9.1f} "
              f"{row['error']:6.1%}  {row['unit']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
