"""bench/move_costs.py on the bundled tiny scenario: the fixed move times are scaled as asked,
the scale-1 row is a plain run of each policy, and a dearer move costs rlix loading time."""

from __future__ import annotations

import argparse

import pytest

from rlix.scenarios import load_scenario
from rlix.sim import simulate
from tests.bench.bench_module import load


def test_scaled_costs_scale_both_fixed_times_and_keep_other_overrides() -> None:
    move_costs = load("move_costs")
    scenario = load_scenario("tiny").model_copy(update={"costs": {"shrink_fixed_s": 3.0, "train_mfu": 0.3}})
    assert move_costs.scaled_costs(scenario, 0.5) == {"expand_fixed_s": 1.0, "shrink_fixed_s": 1.5, "train_mfu": 0.3}


def test_rows_match_plain_runs_and_dearer_moves_load_longer() -> None:
    move_costs = load("move_costs")
    rows = move_costs.bench("tiny", [1.0, 4.0], seeds=0, workers=1, quiet=True)
    assert [row["scale"] for row in rows] == [1.0, 4.0]
    scenario = load_scenario("tiny")
    for policy, key in (("rlix", "rlix"), ("gap-ratio", "rlix_model")):
        plain = simulate(scenario.with_policy(policy, scenario.policy.config.model_dump()), plots=False)
        assert rows[0][f"{key}_mean_jct_s"] == pytest.approx(plain.summary["overall"]["jobs"]["mean_jct_s"])
        assert rows[1][f"{key}_loading_share"] > rows[0][f"{key}_loading_share"]
    assert rows[0]["ratio"] == pytest.approx(rows[0]["rlix_mean_jct_s"] / rows[0]["rlix_model_mean_jct_s"])
    assert (rows[1]["expand_fixed_s"], rows[1]["shrink_fixed_s"]) == (8.0, 4.0)


def test_scales_reject_bad_input() -> None:
    move_costs = load("move_costs")
    assert move_costs._scales("2,0.5,2") == [0.5, 2.0]
    for text in ("", "0,1", "-1", "a,1"):
        with pytest.raises(argparse.ArgumentTypeError):
            move_costs._scales(text)


def test_a_target_that_is_no_ratio_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    move_costs = load("move_costs")
    for text in ("nan", "0", "-1"):
        with pytest.raises(SystemExit) as stop:
            move_costs.main(["--target", text])
        assert stop.value.code == 2
        assert "argument --target: expected a positive number" in capsys.readouterr().err
