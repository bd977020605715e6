"""The floors of rlix.sim.bounds: the rollout floor against a token-by-token decode computed
here, any packing of sequences into iterations, and the simulator's own busy rollout time; the
least mean flow on one machine against every schedule of small jobs, searched exhaustively."""

from __future__ import annotations

import math

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


def least_total_flow(jobs: list[tuple[int, int]]) -> int:
    """Every preemptive schedule of integer (release, work) jobs on one machine in unit slots
    (which machine-second goes to which released job, or none), searched exhaustively: the
    least sum of completion less release."""
    from functools import cache

    @cache
    def best(now: int, left: tuple[int, ...]) -> int:
        if not any(left):
            return 0
        ready = [i for i, (release, _) in enumerate(jobs) if release <= now and left[i]]
        if not ready:
            return best(now + 1, left)
        options = []
        for i in ready:
            after = left[:i] + (left[i] - 1,) + left[i + 1:]
            done = now + 1 - jobs[i][0] if after[i] == 0 else 0
            options.append(done + best(now + 1, after))
        return min(options)

    return best(0, tuple(work for _, work in jobs))


def no_preemption_total_flow(jobs: list[tuple[int, int]]) -> int:
    """The least sum of completion less release over every order run without preemption."""
    from itertools import permutations

    totals = []
    for order in permutations(jobs):
        now = total = 0
        for release, work in order:
            now = max(now, release) + work
            total += now - release
        totals.append(total)
    return min(totals)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(1, 4)), min_size=1, max_size=4))
def test_shortest_remaining_first_is_the_least_mean_flow_on_one_machine(jobs: list[tuple[int, int]]) -> None:
    from rlix.sim.bounds import srpt_mean_flow_s

    mean_s = srpt_mean_flow_s([(float(r), float(w)) for r, w in jobs])
    assert mean_s * len(jobs) == pytest.approx(least_total_flow(jobs))
    assert mean_s * len(jobs) <= no_preemption_total_flow(jobs) + 1e-9


def test_shortest_remaining_first_refuses_what_is_no_job() -> None:
    from rlix.sim.bounds import srpt_mean_flow_s

    for jobs in ([], [(0.0, -1.0)], [(math.nan, 1.0)], [(0.0, math.inf)]):
        with pytest.raises(ValueError):
            srpt_mean_flow_s(jobs)
    assert srpt_mean_flow_s([(3.0, 0.0), (0.0, 2.0)]) == pytest.approx(1.0)  # zero work: done on arrival
