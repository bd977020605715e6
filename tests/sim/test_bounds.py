"""The rollout floor (rlix.sim.bounds) against a token-by-token decode computed here, any
packing of sequences into iterations, and against the simulator's own busy rollout time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlix.scenarios import load_scenario
from rlix.sim import simulate
from rlix.sim.api import alone_on_pool
from rlix.sim.bounds import rollout_gpu_s_floor
from rlix.sim.compare import rollout_floor
from rlix.sim.costs import CostModel

COSTS = CostModel.for_model("7b")


def decode_gpu_s(trajectories: list[tuple[int, int]], tp: int, batches: list[int]) -> float:
    """Decode every trajectory token by token on one rank of `tp` GPUs, taking the next
    `batches[i]` unfinished sequences (cycling through the list) into iteration i: each
    iteration costs alpha(b) + beta * (the KV its sequences hold) on each GPU."""
    left = [[prompt, response] for prompt, response in trajectories if response]  # [kv, tokens left]
    total_s = 0.0
    i = 0
    while left:
        b = min(batches[i % len(batches)], len(left))
        running = left[:b]
        alpha, beta = COSTS.decode_coefficients(b, tp)
        total_s += alpha + beta * sum(kv for kv, _ in running)
        for seq in running:
            seq[0] += 1
            seq[1] -= 1
        left = [seq for seq in left if seq[1]] if any(seq[1] == 0 for seq in running) else left[b:] + running
        i += 1
    return tp * total_s


@settings(max_examples=60, deadline=None)
@given(
    trajectories=st.lists(st.tuples(st.integers(0, 300), st.integers(0, 200)), min_size=1, max_size=12),
    batches=st.lists(st.integers(1, 16), min_size=1, max_size=5),
    tp=st.sampled_from([1, 2, 4]),
)
def test_no_packing_decodes_below_the_floor(trajectories: list[tuple[int, int]], batches: list[int], tp: int) -> None:
    floor = rollout_gpu_s_floor(COSTS, tp, 16, trajectories)
    assert decode_gpu_s(trajectories, tp, batches) >= floor * (1 - 1e-12)


def test_the_floor_is_reached_by_equal_sequences_at_the_cheapest_batch() -> None:
    """Equal sequences decoded together at the batch whose alpha(b) / b is least: every term of
    the floor is met exactly (the alpha terms and each token's KV read)."""
    best = min(range(1, 65), key=lambda b: COSTS.decode_coefficients(b, 2)[0] / b)
    trajectories = [(120, 50)] * (3 * best)
    floor = rollout_gpu_s_floor(COSTS, 2, 64, trajectories)
    assert decode_gpu_s(trajectories, 2, [best]) == pytest.approx(floor, rel=1e-9)
    assert decode_gpu_s(trajectories, 2, [1]) > floor * 1.5  # one at a time is far above it


def test_a_simulated_rollout_is_never_busy_for_less_than_its_floor() -> None:
    for pid in ("ft", "lora"):
        alone = alone_on_pool(load_scenario("tiny"), pid)
        result = simulate(alone, plots=False)
        activity = result.tables["activity"]
        busy = activity[(activity["cluster"] == "actor_infer") & (activity["kind"] == "busy")]
        busy_gpu_s = float((busy["t_end"] - busy["t_start"]).sum())
        floor = rollout_floor(alone, result.tables["rollouts"])
        assert 0 < floor <= busy_gpu_s, pid
