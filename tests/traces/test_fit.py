"""Fitting a per-step capped lognormal to a summary log, and sampling a trace from the fit."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from rlix.traces import TraceError, capped_clip, capped_mean, fit_summary, fit_trace
from rlix.traces.fit import read_summary

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
    fit = fit_summary(summary)
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
