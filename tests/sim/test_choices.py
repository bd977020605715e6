"""rlix.sim.choices: comma-separated scenarios and policies, checked while parsed."""

from __future__ import annotations

import argparse

import pytest

from rlix.sim.choices import bundled_scenario_names, policy_names


def test_names_in_order_with_blanks_dropped() -> None:
    assert policy_names(" rlix, gap-ratio ,,") == ["rlix", "gap-ratio"]
    assert bundled_scenario_names("tiny,blog-4on12") == ["tiny", "blog-4on12"]


@pytest.mark.parametrize(("parse", "text", "message"), [
    (policy_names, "rlix,foo,bar", "unknown foo, bar (known: gap-ratio, rlix"),
    (policy_names, " , ", "give at least one (known: "),
    (bundled_scenario_names, "tiny,nope", "unknown nope (bundled: "),
    (bundled_scenario_names, "", "give at least one (bundled: "),
])
def test_bad_lists_name_what_is_wrong(parse: object, text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message.replace("(", r"\(")):
        parse(text)  # type: ignore[operator]


def test_an_option_reports_through_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("--policies", type=policy_names, default="rlix")
    assert parser.parse_args([]).policies == ["rlix"]  # a string default is parsed too
    with pytest.raises(SystemExit):
        parser.parse_args(["--policies", "nope"])
    assert "argument --policies: unknown nope" in capsys.readouterr().err


def test_a_caption_says_one_seed_as_one() -> None:
    from rlix.sim.choices import means_over_seeds

    assert means_over_seeds(1) == "seed 0"
    assert means_over_seeds(8) == "means over seeds 0-7"
