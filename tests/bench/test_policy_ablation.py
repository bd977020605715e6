"""bench/policy_ablation.py: each variant switches one rule from the scenario's own setting,
and its rows are the means of plain runs over the seeds asked for."""

from __future__ import annotations

import pytest

from rlix.scenarios import load_scenario
from rlix.sim import simulate
from tests.bench.bench_module import load


@pytest.mark.parametrize("name", ["lab-day", "blog-4on12", "tiny"])
def test_each_variant_switches_one_rule_from_the_scenarios_setting(name: str) -> None:
    ablation = load("policy_ablation")
    config = load_scenario(name).policy.config
    for label, policy, overrides in ablation.variants(config):
        if policy != "rlix" or label in ("rlix", "rlix, all off"):
            continue
        ((rule, value),) = overrides.items()
        assert value != getattr(config, rule), label
        _name, off, _on = ablation.RULES[rule]
        # "-" where the scenario has the rule on (switched off), "+" where it has it off.
        assert label.startswith("rlix -") == (value == off), label


def test_a_rule_that_acts_only_with_another_is_left_out_where_that_one_is_off() -> None:
    ablation = load("policy_ablation")
    lab_day = load_scenario("lab-day").policy.config  # finish_together off
    blog = load_scenario("blog-4on12").policy.config  # finish_together 12
    assert "rlix -training_yields" not in [label for label, _p, _o in ablation.variants(lab_day)]
    assert "rlix -training_yields" in [label for label, _p, _o in ablation.variants(blog)]
    assert "rlix +drain" in [label for label, _p, _o in ablation.variants(lab_day)]
    assert "rlix -drain" in [label for label, _p, _o in ablation.variants(blog)]


def test_rows_are_the_means_of_plain_runs_over_the_seeds() -> None:
    ablation = load("policy_ablation")
    rows = ablation.bench(["tiny"], seeds=2, workers=2, quiet=True)
    config = load_scenario("tiny").policy.config
    assert [r["variant"] for r in rows] == [label for label, _p, _o in ablation.variants(config)]
    base = load_scenario("tiny")
    for row, (_label, policy, overrides) in zip(rows, ablation.variants(config), strict=True):
        if row["variant"] not in ("rlix", "rlix -keep_warm", "static"):
            continue
        scenario = base.with_policy(policy, {**base.policy.config.model_dump(), **overrides})
        plain = [simulate(scenario.model_copy(update={"seed": seed}), plots=False).summary["overall"] for seed in (0, 1)]
        assert row["mean_jct_s"] == pytest.approx(sum(p["jobs"]["mean_jct_s"] for p in plain) / 2)
        assert row["steps_per_hour"] == pytest.approx(sum(p["steps_per_hour"] for p in plain) / 2)
