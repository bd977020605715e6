"""The cost model against the published figures it cites (WORKLOADS.md), and its overrides.

Each check compares with a published number, not with the model's own output: the Vidur
profile points (including two the fit never saw), vLLM's offline throughput, RollPacker's step
generation time, RLix's weight-sync time, the MFU range for training.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlix.scenarios.models import MODELS, ModelShape
from rlix.sim.costs import GPUS, CostModel
from rlix.sim.engine import RolloutGroup
from rlix.traces import load_bundled

# Published configs of the models Vidur profiled (their config.json).
LLAMA2_7B = ModelShape("llama2-7b", 6.74e9, 32, 4096, 32, 32, 128, 11_008, 32_000)
LLAMA2_70B = ModelShape("llama2-70b", 68.98e9, 80, 8192, 64, 8, 128, 28_672, 32_000)

H100 = CostModel.for_model("7b")


def test_reproduces_the_vidur_tp1_profile_it_is_fitted_on() -> None:
    costs = CostModel.for_model(LLAMA2_7B)
    published_ms = {1: 5.6, 64: 5.6, 128: 6.4, 256: 9.2, 512: 12.0, 1024: 21.0, 4096: 83.2}
    for tokens, ms in published_ms.items():
        assert costs.linear_seconds(tokens, 1) * 1e3 == pytest.approx(ms, rel=0.01)


def test_predicts_vidur_floors_it_was_not_fitted_on() -> None:
    # TP8 floor of Llama-2-7B: 1.3 ms; Llama-2-70B at TP8: 8.4 ms (WORKLOADS.md).
    assert CostModel.for_model(LLAMA2_7B).linear_seconds(1, 8) * 1e3 == pytest.approx(1.3, rel=0.15)
    assert CostModel.for_model(LLAMA2_70B).linear_seconds(1, 8) * 1e3 == pytest.approx(
        8.4, rel=0.10
    )
    assert CostModel.for_model(LLAMA2_7B).linear_seconds(1, 2) * 1e3 == pytest.approx(3.2, rel=0.01)


def test_attention_term_is_kv_bytes_over_hbm_bandwidth() -> None:
    # Qwen2.5-7B: 56 KiB of KV per token; H100 HBM 3.35 TB/s (WORKLOADS.md).
    _, beta = H100.decode_coefficients(64, 1)
    assert beta == pytest.approx(56 * 1024 / 3.35e12, rel=1e-9)
    _, beta_tp2 = H100.decode_coefficients(64, 2)
    assert beta_tp2 == pytest.approx(beta / 2, rel=1e-9)
    # Qwen2.5-1.5B has 2 KV heads: past TP2 the heads are replicated, not split further.
    small = CostModel.for_model("1.5b")
    assert small.decode_coefficients(8, 4)[1] == small.decode_coefficients(8, 2)[1]


def test_tensor_parallel_decode_is_faster_but_not_linearly() -> None:
    alpha1 = H100.decode_coefficients(128, 1)[0]
    alpha2 = H100.decode_coefficients(128, 2)[0]
    alpha8 = H100.decode_coefficients(128, 8)[0]
    assert alpha8 < alpha2 < alpha1
    assert alpha8 > alpha1 / 8


@pytest.mark.parametrize(("prompt", "response"), [(800, 128), (1000, 1000), (2000, 500)])
def test_single_gpu_throughput_is_the_order_of_vllm_offline(prompt: int, response: int) -> None:
    # Llama-3.1-8B FP8 on vLLM 0.10 does ~5,777 output tokens/s offline on one H100: our 7B in
    # BF16 with continuous batching must land within a factor of 3 of it.
    group = RolloutGroup(H100, 1, 256, H100.kv_capacity_tokens(1))
    group.add_engine(0, 0.0)
    n = 2000
    group.submit(np.arange(n), np.full(n, prompt), np.full(n, response), np.zeros(n, int))
    t, reason = group.advance(math.inf)
    assert reason == "batch_done"
    assert 5777 / 3 <= n * response / t <= 5777 * 3


def test_a_step_capped_at_4k_generates_in_rollpackers_time() -> None:
    # RollPacker (Qwen2.5-7B, 4k cap): steps that hit the 4,096 cap take ~42 s to generate.
    # The tail decides it: 512 x 16 math-like samples over 64 H100s.
    trace = load_bundled("math_small")
    rng = np.random.default_rng(0)
    pick = rng.integers(0, len(trace), 512 * 16)
    prompts = trace["prompt_tokens"].to_numpy()[pick]
    responses = trace["response_tokens"].to_numpy()[pick]
    assert responses.max() == 4096
    group = RolloutGroup(H100, 1, 256, H100.kv_capacity_tokens(1))
    for rank in range(64):
        group.add_engine(rank, 0.0)
    group.submit(np.arange(len(pick)), prompts, responses, np.zeros(len(pick), int))
    t, _ = group.advance(math.inf)
    assert 42 / 1.5 <= t <= 42 * 1.5


def test_rollout_dominates_a_long_tailed_7b_grpo_step() -> None:
    # Rollout is 70% to over 90% of RL step time (APRIL, RollPacker, SortedRL; WORKLOADS.md) in
    # the long-tail regime Seer describes (400-800 prompts x 8-16 samples, 32-256 GPUs, long
    # caps). A 7B step of 512 x 16 agentic samples (32k cap) on 64 GPUs, colocated: rollout
    # against actor training plus old and reference log-probs. A 10-point margin below 70%.
    trace = load_bundled("agentic_small")
    rng = np.random.default_rng(1)
    pick = rng.integers(0, len(trace), 512 * 16)
    prompts = trace["prompt_tokens"].to_numpy()[pick]
    responses = trace["response_tokens"].to_numpy()[pick]
    group = RolloutGroup(H100, 1, 256, H100.kv_capacity_tokens(1))
    for rank in range(64):
        group.add_engine(rank, 0.0)
    group.submit(np.arange(len(pick)), prompts, responses, np.zeros(len(pick), int))
    rollout_s, _ = group.advance(math.inf)
    tokens = int(prompts.sum() + responses.sum())
    others_s = H100.train_seconds(tokens, 64) + 2 * H100.forward_seconds(tokens, 64)
    assert 0.6 <= rollout_s / (rollout_s + others_s) <= 0.95


def test_training_runs_at_a_published_mfu() -> None:
    tokens = 10_000_000
    for name, model in MODELS.items():
        costs = CostModel.for_model(name)
        mfu = 6 * model.num_params * tokens / (costs.train_seconds(tokens, 8) * 8 * 989e12)
        assert 0.35 <= mfu <= 0.50
        fwd = 2 * model.num_params * tokens / (costs.forward_seconds(tokens, 8) * 8 * 989e12)
        assert 0.35 <= fwd <= 0.50


def test_weight_sync_matches_rlix_for_a_30b_model() -> None:
    # RLix: ~90 s to sync a 30B model through CPU serialization.
    costs = CostModel.for_model("32b")
    assert costs.weight_sync_seconds() * 30e9 / MODELS["32b"].num_params == pytest.approx(
        90, rel=0.05
    )
    # Over NVLink (450 GB/s) the same bytes take well under a second.
    nccl = costs.with_overrides({"weight_sync_bytes_per_s": 450e9})
    assert nccl.weight_sync_seconds() < 0.5


def test_kv_capacity_fills_usable_hbm_after_weights() -> None:
    for name, model in MODELS.items():
        for tp in (1, 2, 4, 8):
            costs = CostModel.for_model(name)
            usable = 80 * 2**30 * 0.9 - model.weight_bytes / tp
            if usable <= 0:
                with pytest.raises(ValueError, match="does not fit"):
                    costs.kv_capacity_tokens(tp)
                continue
            per_gpu = model.kv_bytes_per_token / min(tp, model.num_kv_heads)
            assert costs.kv_capacity_tokens(tp) == int(usable // per_gpu)
    # Qwen2.5-7B at TP1: (72 GiB - 15.2 GB) / 56 KiB, about a million tokens.
    assert 1.0e6 < H100.kv_capacity_tokens(1) < 1.2e6


def test_weight_moves_and_init_are_seconds_not_minutes() -> None:
    for name in MODELS:
        costs = CostModel.for_model(name)
        tp = 8 if name == "70b" else 1
        assert 1.0 < costs.weight_load_seconds(tp) < 30.0
        assert 0.5 < costs.offload_seconds(tp) < 30.0
        assert 60.0 <= costs.init_seconds() < 300.0


def test_a100_is_slower_than_h100() -> None:
    a100 = CostModel.for_model("7b", gpu="a100")
    assert a100.decode_iteration_seconds(64, 100_000, 1) > H100.decode_iteration_seconds(
        64, 100_000, 1
    )
    assert a100.train_seconds(10**6, 8) == pytest.approx(H100.train_seconds(10**6, 8) * 989 / 312)
    assert set(GPUS) == {"h100", "a100"}


def test_overrides_replace_fields_and_name_bad_ones() -> None:
    costs = CostModel.for_model("7b", overrides={"train_mfu": 0.5, "model": "32b"})
    assert costs.train_mfu == 0.5 and costs.model is MODELS["32b"]
    assert costs.with_overrides({}) is costs
    with pytest.raises(ValueError, match="'train_mfuu'"):
        H100.with_overrides({"train_mfuu": 0.5})
    with pytest.raises(ValueError, match="'train_mfu'.*1.5"):
        H100.with_overrides({"train_mfu": 1.5})
    with pytest.raises(ValueError, match="'hbm_bytes_per_s'"):
        H100.with_overrides({"hbm_bytes_per_s": "fast"})
    with pytest.raises(ValueError, match="'decode_overhead_s'"):
        H100.with_overrides({"decode_overhead_s": -1})
    with pytest.raises(ValueError, match="'linear_profile_tp1_s'"):
        H100.with_overrides({"linear_profile_tp1_s": [[64, 5e-3]]})
    with pytest.raises(ValueError, match="'linear_floor_tp2_s'"):
        H100.with_overrides({"linear_floor_tp2_s": 1e-3})
    with pytest.raises(ValueError, match="unknown model size '9b'"):
        H100.with_overrides({"model": "9b"})
    with pytest.raises(ValueError, match="unknown gpu 'tpu'"):
        CostModel.for_model("7b", gpu="tpu")
    profile = CostModel.for_model(
        "7b", overrides={"linear_profile_tp1_s": [[64, 6e-3], [1024, 30e-3]]}
    )
    assert profile.linear_seconds(1024, 1) > H100.linear_seconds(1024, 1)
    assert math.isfinite(profile.decode_iteration_seconds(10_000, 10**6, 1))


def test_a_prefetched_init_holds_its_gpus_only_to_copy_the_weights_in() -> None:
    costs = CostModel.for_model("7b")
    read_s = costs.model.weight_bytes / costs.storage_bytes_per_s
    assert costs.prefetch_seconds() == pytest.approx(read_s)
    assert costs.init_seconds(8) == pytest.approx(costs.init_fixed_s + read_s)
    copy_s = costs.model.weight_bytes / 8 / costs.host_link_bytes_per_s
    assert costs.init_seconds(8, prefetched=True) == pytest.approx(costs.init_fixed_s + copy_s)
    assert copy_s < read_s / 50  # eight host links in parallel against one storage read


def test_measured_startup_charges_the_prefetch_inside_an_init_that_does_not_prefetch() -> None:
    measured = CostModel.for_model("7b", overrides={"init_s": 0.5, "prefetch_s": 2.0})
    assert measured.prefetch_seconds() == 2.0
    assert measured.init_seconds(8, prefetched=True) == 0.5
    assert measured.init_seconds(8) == 2.5
    # Measured without a prefetch: the init measured holds the load; nothing is added.
    assert CostModel.for_model("7b", overrides={"init_s": 2.5}).init_seconds(8) == 2.5
