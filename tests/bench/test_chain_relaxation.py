"""bench/chain_relaxation.py: the greedy schedule of the chain model on hand-made chains,
timed by hand, and on a real blog-4on12 run no shorter than its gangs and inits in turn."""

from __future__ import annotations

import pytest

from tests.bench.bench_module import load


def test_one_job_by_hand() -> None:
    bench = load("chain_relaxation")
    # read until 1, init 1-4; steps 0 and 1 (staleness 1) roll out together 4-14 on one rank;
    # gang 0 14-16, publish 16-21; gang 1 21-23 (its rollout long done), publish 23-28.
    chain = bench.Chain("A", 3.0, (10.0, 10.0), (2.0, 2.0), (5.0, 5.0), 1)
    assert bench.greedy_makespan([chain], 1.0, 6, 2) == (28.0, {"A": 28.0})


def test_on_policy_steps_wait_for_the_publish() -> None:
    bench = load("chain_relaxation")
    # init 0-1; roll 1-5; gang 5-6; publish 6-8; only then step 1: roll 8-12, gang 12-13, publish 13-15
    chain = bench.Chain("A", 1.0, (4.0, 4.0), (1.0, 1.0), (2.0, 2.0), 0)
    assert bench.greedy_makespan([chain], 0.0, 1, 1)[0] == pytest.approx(15.0)


def test_no_rank_beside_a_gang() -> None:
    bench = load("chain_relaxation")
    # One rank, none while a gang (or an init) runs: A's init 0-1, B's 1-2 (A may not roll out
    # meanwhile); A first by name at a tie, 2-12; A's gang 12-14 stops B; B rolls 14-24, gang 24-26.
    chains = [bench.Chain(j, 1.0, (10.0,), (2.0,), (0.0,), 1) for j in ("A", "B")]
    assert bench.greedy_makespan(chains, 0.0, 1, 0) == (26.0, {"A": 14.0, "B": 26.0})


def test_the_job_with_the_most_chain_left_rolls_out_first() -> None:
    bench = load("chain_relaxation")
    # One rank, kept beside a gang. A: one step; B: two on-policy steps, so more chain left.
    # A's init 0-1, B's 1-2 (A rolls 1-2); from 2 B (12 s of chain left) holds the rank over A
    # (10): B rolls 2-12; while B trains 12-13 A rolls; B's step 1 (11 s left, A 9) rolls 13-23
    # and trains 23-24, B ends; A rolls 23-31 (its last 8 s) and trains 31-32.
    a = bench.Chain("A", 1.0, (10.0,), (1.0,), (0.0,), 0)
    b = bench.Chain("B", 1.0, (10.0, 10.0), (1.0, 1.0), (0.0, 0.0), 0)
    makespan, ends = bench.greedy_makespan([a, b], 0.0, 1, 1)
    assert ends["B"] == pytest.approx(24.0)
    assert ends["A"] == pytest.approx(32.0) and makespan == pytest.approx(32.0)


def test_a_scenario_the_model_does_not_fit_is_refused() -> None:
    bench = load("chain_relaxation")
    from rlix.scenarios import load_scenario

    with pytest.raises(ValueError, match="more than half the pool"):
        bench._model(load_scenario("math-rlvr"))


def test_blog_run_no_shorter_than_its_gangs_in_turn() -> None:
    bench = load("chain_relaxation")
    from rlix.scenarios import load_scenario
    from rlix.sim.compare import compare

    row = bench.run_one("blog-4on12", 0, ("longest",))
    scenario = load_scenario("blog-4on12")
    assert row["ceiling_makespan_s"] > 0
    # Counted apart from the greedy: every init and gang after the read, one at a time, then a
    # publish. The chains are read from a run of their own.
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as out:
        folder = compare(scenario, ["rlix"], out=Path(out)).run_dirs["rlix"]
        assert folder is not None
        chains, release_s = bench.chains_of_run(scenario, folder, "longest")
    assert len(chains) == 4 and all(len(c.rollout_s) == 10 for c in chains)
    in_turn_s = release_s + sum(c.init_s + sum(c.gang_s) for c in chains) + min(c.publish_s[-1] for c in chains)
    assert row["longest_makespan_s"] >= in_turn_s - 1e-6
