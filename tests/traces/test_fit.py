"""Fitting a per-step capped lognormal to a summary log, and sampling a trace from the fit."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pandas as pd
import pytest

from rlix.traces import TraceError, capped_clip, capped_mean, fit_summary, fit_trace
from rlix.traces.fit import FitWarning, read_summary

CAP = 4096
TRUE_PARAMS = [(6.8, 0.7), (7.0, 0.8), (7.2, 0.9), (7.4, 1.0), (7.6, 1.1), (6.2, 0.5)]


def verl_summary() -> pd.DataFrame:
    """Per-step figures as verl logs them, from known (mu, sigma) and a 4k cap."""
    rows = []
    for step, (mu, sigma) in enumerate(TRUE_PARAMS):
        clip = round(capped_clip(mu, sigma, CAP), 4)
        top = CAP if clip > 0 else round(math.exp(mu + 3 * sigma))
        mean = capped_mean(mu, sigma, CAP)
        rows.append(
            {
                "step": step,
                "response_length/mean": mean,
                "response_length/max": top,
                "response_length/clip_ratio": clip,
            }
        )
    return pd.DataFrame(rows)


def test_equations_limits() -> None:
    assert capped_clip(math.log(CAP), 1.0, CAP) == pytest.approx(0.5)
    # Far below the cap, the capped mean is the lognormal mean exp(mu + sigma²/2).
    assert capped_mean(3.0, 0.5, CAP) == pytest.approx(math.exp(3.0 + 0.125))
    assert capped_mean(20.0, 0.5, CAP) == pytest.approx(CAP)


def test_fit_recovers_parameters() -> None:
    summary = read_summary_frame(verl_summary())
    with warnings.catch_warnings():
        warnings.simplefilter("error", FitWarning)  # every step is within reach
        fit = fit_summary(summary)
    assert fit["fitted_mean"].to_numpy() == pytest.approx(summary["mean"].to_numpy(), rel=1e-9)
    assert fit["max_tokens"].unique().tolist() == [CAP]
    # The last step never reaches the cap: its sigma comes from the max, only roughly.
    for (mu, sigma), row in zip(TRUE_PARAMS[:-1], fit.iloc[:-1].itertuples(), strict=True):
        assert row.mu == pytest.approx(mu, abs=0.01)
        assert row.sigma == pytest.approx(sigma, abs=0.01)


def read_summary_frame(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.rename(columns=lambda c: c.removeprefix("response_length/"))


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_fitted_trace_reproduces_mean_and_clip_within_5_percent(
    tmp_path: Path, suffix: str
) -> None:
    summary = verl_summary()
    path = tmp_path / f"summary{suffix}"
    if suffix == ".csv":
        summary.to_csv(path, index=False)
    else:
        summary.to_json(path, orient="records", lines=True)
    trace = fit_trace(path, samples_per_step=2048, seed=7)
    assert len(trace) == 2048 * len(summary)
    got = trace.groupby("step").agg(mean=("response_tokens", "mean"), clip=("capped", "mean"))
    for step, expected in summary.iterrows():
        assert got.loc[step, "mean"] == pytest.approx(expected["response_length/mean"], rel=0.05)
        clip = expected["response_length/clip_ratio"]
        assert got.loc[step, "clip"] == pytest.approx(clip, rel=0.05, abs=1e-3)
    overall_clip = summary["response_length/clip_ratio"].mean()
    assert trace["capped"].mean() == pytest.approx(overall_clip, rel=0.05)
    assert trace["response_tokens"].mean() == pytest.approx(
        summary["response_length/mean"].mean(), rel=0.05
    )


def test_fit_is_deterministic(tmp_path: Path) -> None:
    path = tmp_path / "summary.csv"
    verl_summary().to_csv(path, index=False)
    pd.testing.assert_frame_equal(fit_trace(path, seed=3), fit_trace(path, seed=3))


def test_short_names_and_column_map(tmp_path: Path) -> None:
    path = tmp_path / "summary.csv"
    frame = read_summary_frame(verl_summary()).rename(columns={"mean": "len_avg"})
    frame.drop(columns="step").to_csv(path, index=False)
    summary = read_summary(path, {"mean": "len_avg"})
    assert summary["step"].tolist() == list(range(len(TRUE_PARAMS)))


@pytest.mark.parametrize(
    ("text", "fragment", "line"),
    [
        ("mean,max,clip_ratio\n100,4096,0.5\n", "cannot come from a cap of 4096", 2),
        ("mean,max,clip_ratio\n900,1000,0\n500,800,1.5\n", "not between 0 and 1", 3),
        ("mean,max,clip_ratio\n900,800,0\n", "above the step's max", 2),
        ("mean,max,clip_ratio\n900,-1,0\n", "-1 is not positive", 2),
        ("mean,max\n900,1000\n", "summary has no clip_ratio column", None),
        # Blank lines count as lines: each error names the line a user's editor shows.
        ("mean,max,clip_ratio\n\n900,1000,0\n\n500,800,1.5\n", "not between 0 and 1", 5),
        ("mean,max,clip_ratio\n900,1000,0\n\n900,800,0\n", "above the step's max", 4),
        ("mean,max,clip_ratio\n\n900,-1,0\n", "-1 is not positive", 3),
    ],
)
def test_bad_summary(tmp_path: Path, text: str, fragment: str, line: int | None) -> None:
    path = tmp_path / "summary.csv"
    path.write_text(text)
    with pytest.raises(TraceError, match=fragment) as caught:
        fit_trace(path)
    assert caught.value.line == line
    assert caught.value.file == str(path)
    if line is not None:
        assert str(caught.value).startswith(f"{path}, line {line}")


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"max_tokens": 0}, "max_tokens must be between 1 and 10,000,000, not 0"),
        ({"max_tokens": -1}, "max_tokens must be between 1 and 10,000,000, not -1"),
        ({"seed": -1}, "seed must be 0 or more, not -1"),
    ],
)
def test_bad_options(tmp_path: Path, options: dict[str, int], fragment: str) -> None:
    path = tmp_path / "summary.csv"
    path.write_text("mean,max,clip_ratio\n100,200,0.1\n")
    # max_tokens=0 used to be ignored (the cap came from the log); -1 blamed the log's row.
    with pytest.raises(TraceError, match=fragment):
        fit_trace(path, **options)  # type: ignore[arg-type]


def test_mean_out_of_reach_warns_with_logged_and_fitted_mean(tmp_path: Path) -> None:
    """Line 3's mean of 10 under a max of 4000 (clip 0) is out of the model's reach: no lognormal
    of 1024 samples has both. Line 4's clip 0.5 with a mean just above 0.5 × 4096 needs a sigma
    above 10. Both are fitted as near as the model goes, the trace is sampled, and the warning
    says what each step's mean became; line 2 fits exactly and is not named."""
    path = tmp_path / "summary.csv"
    path.write_text("step,mean,max,clip_ratio\n0,900,4096,0.01\n1,10,4000,0\n2,2100,4096,0.5\n")
    with pytest.warns(FitWarning) as caught:
        trace = fit_trace(path)
    assert len(caught) == 1
    warning = caught[0].message
    assert isinstance(warning, FitWarning)
    assert str(warning).startswith(f"{path}: the fitted mean misses the logged one at 2 of 3 steps")
    assert "line 3, step 1: logged 10, fitted 20.5 (+105%); line 4, step 2: logged 2,100, " \
        "fitted 2,210 (+5%)" in str(warning)
    assert [(m.step, m.logged, m.where) for m in warning.misses] == [
        (1, 10.0, {"line": 3}),
        (2, 2100.0, {"line": 4}),
    ]
    # The fitted means are what the sampled trace has (up to sampling), not the logged ones.
    sampled = trace.groupby("step")["response_tokens"].mean()
    for miss in warning.misses:
        assert sampled[miss.step] == pytest.approx(miss.fitted, rel=0.03)
    assert sampled[0] == pytest.approx(900, rel=0.01)


def test_far_tail_of_the_fit_is_not_lost_to_rounding() -> None:
    """Equation (2) at a large sigma multiplies a far-tail Phi by a large exp: Phi(-8.4) is about
    2e-17, which 1 + erf rounds to 0. That term is 4096 × 0.047 here, so the fitted mean must
    match a numerical integral of the capped lognormal."""
    mu, sigma, cap = math.log(4096), 8.4, 4096
    # E[min(X, cap)] = ∫_0^cap P(X > x) dx, integrated in u = ln x for the long left tail.
    steps = 400_000
    low, high = mu - 12 * sigma, math.log(cap)
    width = (high - low) / steps
    total = 0.0
    for i in range(steps):
        u = low + (i + 0.5) * width
        total += math.exp(u) * 0.5 * math.erfc((u - mu) / (sigma * math.sqrt(2))) * width
    assert capped_mean(mu, sigma, cap) == pytest.approx(total, rel=1e-4)
    assert capped_mean(mu, sigma, cap) > cap / 2 + 150


def test_a_cap_below_a_logged_max_is_an_error(tmp_path: Path) -> None:
    """No sample of a run is longer than its cap: a --max-tokens below a step's logged max (or a
    cap taken from the steps that clipped, below another step's max) was fitted silently."""
    path = tmp_path / "summary.csv"
    path.write_text("mean,max,clip_ratio\n900,4096,0.01\n4096,4096,1\n")
    with pytest.raises(TraceError) as caught:
        fit_trace(path, max_tokens=2000)
    assert str(caught.value) == (
        f"{path}, line 2: the step's max 4096 is above the cap given (--max-tokens), 2000; give the "
        "run's cap with --max-tokens, at least 4096"
    )
    path.write_text("mean,max,clip_ratio\n900,5000,0\n1000,4096,0.5\n")
    with pytest.raises(TraceError, match=r"line 2: the step's max 5000 is above the cap taken from the log "
                       r"\(the largest max of a step that clipped\), 4096"):
        fit_trace(path)


@pytest.mark.parametrize("max_tokens", [8000])
def test_clip_ratio_one_with_a_mean_off_the_cap_is_an_error(tmp_path: Path, max_tokens: int) -> None:
    """At clip ratio 1 every sample is at the cap, so the mean is the cap: a --max-tokens too high
    for the log was fitted silently at the cap, far from the logged mean (one too low is below
    the step's max: test_a_cap_below_a_logged_max_is_an_error)."""
    path = tmp_path / "summary.csv"
    path.write_text("mean,max,clip_ratio\n900,4096,0.01\n4096,4096,1\n")
    with pytest.raises(TraceError) as caught:
        fit_trace(path, max_tokens=max_tokens)
    assert str(caught.value) == (
        f"{path}, line 3: mean 4096 cannot come from a cap of {max_tokens} with clip ratio 1 "
        f"(every sample is at the cap, so the mean is {max_tokens})"
    )


def test_clip_ratio_one_at_the_cap_fits() -> None:
    summary = pd.DataFrame({"step": [0], "mean": [4095.5], "max": [4096], "clip_ratio": [1.0]})
    with warnings.catch_warnings():
        warnings.simplefilter("error", FitWarning)
        fit = fit_summary(summary)
    assert fit.loc[0, "sigma"] == 0.0
    assert fit.loc[0, "fitted_mean"] == pytest.approx(4096)


def test_a_step_of_one_length_under_a_cap_taken_from_the_log_asks_for_the_cap(tmp_path: Path) -> None:
    """Every sample of the one step 1000 tokens, none clipped: the cap guessed from the log is
    1000 too, and the error said '1000 ... must lie between 0 and 1000'. Given the run's cap, the
    step is fitted as what it is, a point at 1000."""
    path = tmp_path / "summary.csv"
    path.write_text("mean,max,clip_ratio\n1000,1000,0\n")
    with pytest.raises(TraceError) as caught:
        fit_trace(path)
    assert str(caught.value) == (
        f"{path}, line 2: mean 1000 is the step's max and its clip ratio 0: every sample has that "
        "length, which is also the cap taken from the log (its largest max), so every sample "
        "would be at the cap; give the run's cap with --max-tokens"
    )
    with pytest.raises(TraceError, match=r"\(it must be above 0 and below 1000\)"):
        fit_trace(path, max_tokens=1000)
    trace = fit_trace(path, max_tokens=4096, samples_per_step=64)
    assert set(trace["response_tokens"]) == {1000} and not trace["capped"].any()
