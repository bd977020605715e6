"""Fit a per-step capped lognormal to a step-level summary log and sample a trace from it.

verl-style loggers write, per step, `response_length/mean`, `response_length/max` and
`response_length/clip_ratio` (the share of samples at the cap L). Each step is modelled as
L_ij = min(exp(N(mu, sigma²)), L), and (mu, sigma) are solved from the step's figures with
Phi the standard normal CDF (WORKLOADS.md, "From a step summary"):

    clip = 1 − Phi((ln L − mu) / sigma)                                              (1)
    mean = exp(mu + sigma²/2) · Phi((ln L − mu − sigma²) / sigma) + L · clip          (2)

- 0 < clip < 1: (1) gives mu = ln L − sigma·z with z = Phi⁻¹(1 − clip); (2) then falls
  monotonically in sigma from L to L·clip, so sigma is found by bisection.
- clip = 0: (1) says nothing, so the step's max stands in: the largest of n samples sits near
  the 1 − 1/(n+1) quantile, ln max = mu + sigma·z_n with z_n = Phi⁻¹(1 − 1/(n+1)) and n the
  samples per step; (2) is solved for sigma in (0, z_n] the same way.
- clip = 1: every sample is at the cap (sigma = 0, mu = ln L).

L is the largest `max` of any step with clip > 0 (at the cap, max = L), else the largest max.
Samples use stratified uniforms (one per 1/n slice of (0, 1), shuffled) pushed through the
inverse CDF, so each step's sampled clip ratio and mean match the fit up to rounding.

A logged mean the model cannot have at all (outside (L·clip, L), or other than L at clip = 1:
a cap too low or too high for the log) is a TraceError. A mean inside those bounds may still be
out of the model's reach: with clip = 0, a max far above the mean (no lognormal of n samples
has both), or a clip ratio whose sigma would pass 10. Such a step is fitted as near as the model
goes, and `fit_summary` warns (FitWarning) naming each step's logged and fitted mean.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd

from rlix.traces.columns import apply_column_map, as_column_map
from rlix.traces.errors import TraceError
from rlix.traces.io import read_frame
from rlix.traces.schema import MAX_TOKENS, ColumnKind
from rlix.traces.validate import Where, check_column, locate

_NORMAL = NormalDist()
_SIGMA_MAX = 10.0
#: A fitted step's mean may differ from the logged one by this share before FitWarning says so
#: (and, at clip ratio 1, the logged mean from the cap before it is an error). Where a solution
#: exists the bisection finds it to float precision, so any real gap means there is none; the
#: slack is for a log's rounding (a clip ratio of 0.996 logged as 1.0), not for the model.
MEAN_TOLERANCE = 0.01
#: Steps named in a FitWarning's message; the rest are counted (all are in its `misses`).
_MISSES_SHOWN = 3
# Names a summary column may have, verl's first; the first one present is used.
SUMMARY_ALIASES: dict[str, tuple[str, ...]] = {
    "step": ("step", "training/global_step", "global_step"),
    "mean": ("response_length/mean", "response_length_mean", "mean"),
    "max": ("response_length/max", "response_length_max", "max"),
    "clip_ratio": ("response_length/clip_ratio", "response_length_clip_ratio", "clip_ratio"),
}


class FitWarning(UserWarning):
    """Some steps' fitted mean misses the logged one: the model cannot reach it (module docs)."""

    def __init__(self, message: str, misses: tuple[MeanMiss, ...] = ()) -> None:
        super().__init__(message)
        self.misses = misses


@dataclass(frozen=True)
class MeanMiss:
    """A step whose fitted mean is not its logged mean; `where` is its line or row in the log."""

    step: int
    logged: float
    fitted: float
    where: Where


def _cdf(x: float) -> float:
    """Phi(x), accurate far into the lower tail.

    NormalDist.cdf computes 1 + erf(...), which rounds to 0 below about x = -8; equation (2)
    multiplies Phi by exp(mu + sigma²/2), up to about e^50, so that would lose the whole term.
    """
    return 0.5 * math.erfc(-x / math.sqrt(2))


def capped_clip(mu: float, sigma: float, cap: float) -> float:
    """Equation (1): the share of samples at the cap."""
    if sigma == 0:
        return 1.0 if mu >= math.log(cap) else 0.0
    return _cdf((mu - math.log(cap)) / sigma)  # 1 − Phi(a) as Phi(−a): exact for a small clip


def capped_mean(mu: float, sigma: float, cap: float) -> float:
    """Equation (2): the mean of min(exp(N(mu, sigma²)), cap)."""
    if sigma == 0:
        return min(math.exp(mu), cap)
    below = math.exp(mu + sigma**2 / 2) * _cdf((math.log(cap) - mu - sigma**2) / sigma)
    return below + cap * capped_clip(mu, sigma, cap)


def read_summary(path: str | Path, column_map: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Read a step summary (CSV, JSONL or Parquet) as columns step, mean, max, clip_ratio.

    Column names are found through SUMMARY_ALIASES (verl's `response_length/mean` etc.);
    `column_map` maps these four names to the file's. Without a step column, rows are steps 0..n-1.
    """
    raw = read_frame(path)
    mapping = dict(column_map or {})
    for target, aliases in SUMMARY_ALIASES.items():
        found = next((a for a in aliases if a in raw.columns), None)
        if target not in mapping and found is not None:
            mapping[target] = found
    for target in ("mean", "max", "clip_ratio"):
        if target not in mapping:
            raise TraceError(
                f"summary has no {target} column (looked for {', '.join(SUMMARY_ALIASES[target])})",
                file=path,
            )
    raw = apply_column_map(raw, mapping, file=path)
    if raw.empty:
        raise TraceError("empty table: no data rows", file=path)
    if "step" not in raw.columns:
        raw["step"] = np.arange(len(raw))
    kinds: dict[str, ColumnKind] = {
        "step": "index",
        "mean": "seconds",
        "max": "length",
        "clip_ratio": "seconds",
    }
    out = {}
    for name, kind in kinds.items():
        out[name], problem = check_column(raw[name], name, kind)
        if problem is not None:
            raise problem.error(path)
    above_one = out["clip_ratio"] > 1
    if above_one.any():
        position = int(above_one.to_numpy().argmax())
        raise TraceError(
            f"clip ratio {out['clip_ratio'].iloc[position]:g} is not between 0 and 1",
            file=path,
            column="clip_ratio",
            **locate(raw.index, position),
        )
    # The index stays as read_frame made it, so fit_summary can point at a step's line.
    return pd.DataFrame(out)


def fit_summary(
    summary: pd.DataFrame,
    *,
    samples_per_step: int = 1024,
    max_tokens: int | None = None,
    file: str | Path | None = None,
) -> pd.DataFrame:
    """Per-step (mu, sigma) of a capped lognormal; columns step, mu, sigma, max_tokens, and
    fitted_mean, the mean of the fitted step (equation (2)).

    Raises TraceError for a step no capped lognormal with this cap fits. Warns (FitWarning) when
    some steps' fitted mean misses the logged one by more than MEAN_TOLERANCE: those steps are
    fitted as near as the model goes, and the warning names each one's logged and fitted mean.
    """
    if max_tokens is not None and not 1 <= max_tokens <= MAX_TOKENS:
        raise TraceError(f"max_tokens must be between 1 and {MAX_TOKENS:,}, not {max_tokens}")
    clipping = summary.loc[summary["clip_ratio"] > 0, "max"]
    cap = max_tokens or int(clipping.max() if len(clipping) else summary["max"].max())
    rows = []
    misses: list[MeanMiss] = []
    for position, record in enumerate(summary.itertuples(index=False)):
        logged = float(record.mean)
        try:
            mu, sigma = _fit_step(
                logged,
                float(record.max),
                float(record.clip_ratio),
                cap,
                samples_per_step,
                cap_from_log=max_tokens is None,
            )
        except TraceError as error:
            where = locate(summary.index, position)
            raise TraceError(error.message, file=file, **where) from None
        fitted = capped_mean(mu, sigma, cap)
        if abs(fitted - logged) > MEAN_TOLERANCE * logged:
            where = locate(summary.index, position)
            misses.append(MeanMiss(int(record.step), logged, fitted, where))
        rows.append(
            {
                "step": int(record.step),
                "mu": mu,
                "sigma": sigma,
                "max_tokens": cap,
                "fitted_mean": fitted,
            }
        )
    if misses:
        warnings.warn(
            FitWarning(_misses_message(misses, len(rows), cap, file), tuple(misses)), stacklevel=2
        )
    return pd.DataFrame(rows)


def _misses_message(
    misses: list[MeanMiss], steps: int, cap: int, file: str | Path | None
) -> str:
    """One line: how many steps miss their logged mean, and the first few of them."""
    shown = []
    for miss in misses[:_MISSES_SHOWN]:
        place = f"line {miss.where['line']}, " if "line" in miss.where else ""
        place += f"row {miss.where['row']} (1-based), " if "row" in miss.where else ""
        change = (miss.fitted - miss.logged) / miss.logged
        shown.append(
            f"{place}step {miss.step}: logged {miss.logged:,.6g}, fitted {miss.fitted:,.4g} "
            f"({change:+.0%})"
        )
    more = len(misses) - len(shown)
    text = (
        f"the fitted mean misses the logged one at {len(misses)} of {steps} steps (no capped "
        f"lognormal with a cap of {cap:,} and the step's clip ratio and max has that mean): "
        + "; ".join(shown)
        + (f"; and {more} more" if more else "")
    )
    return text if file is None else f"{file}: {text}"


def _fit_step(
    mean: float, top: float, clip: float, cap: int, n: int, cap_from_log: bool = False
) -> tuple[float, float]:
    if top > cap:
        # No sample of a run with this cap is longer than it: the cap is not the run's.
        source = ("the cap taken from the log (the largest max of a step that clipped)" if cap_from_log
                  else "the cap given (--max-tokens)")
        raise TraceError(f"the step's max {top:g} is above {source}, {cap}; give the run's cap with "
                         f"--max-tokens, at least {top:g}")
    if clip == 1:
        # Every sample is at the cap, so the mean is the cap: another mean means the cap is
        # not this step's (too low or too high for the log).
        if abs(mean - cap) > MEAN_TOLERANCE * cap:
            raise TraceError(
                f"mean {mean:g} cannot come from a cap of {cap} with clip ratio 1 "
                f"(every sample is at the cap, so the mean is {cap})"
            )
        return math.log(cap), 0.0
    if mean > top:
        raise TraceError(f"mean {mean:g} is above the step's max {top:g}")
    if not clip * cap < mean < cap:
        if clip == 0 and mean == top and cap_from_log:
            # All samples of the step have one length, and no step clipped, so the guessed cap
            # is that length: the log does not show the run's cap, and only the user knows it.
            raise TraceError(
                f"mean {mean:g} is the step's max and its clip ratio 0: every sample has that "
                f"length, which is also the cap taken from the log (its largest max), so every "
                f"sample would be at the cap; give the run's cap with --max-tokens"
            )
        raise TraceError(
            f"mean {mean:g} cannot come from a cap of {cap} with clip ratio {clip:g} "
            f"(it must be above {clip * cap:g} and below {cap})"
        )
    if clip > 0:
        z = _NORMAL.inv_cdf(1 - clip)
        anchor, high = math.log(cap), _SIGMA_MAX
    else:
        z = _NORMAL.inv_cdf(1 - 1 / (n + 1))
        anchor, high = math.log(min(top, cap)), z
    sigma = _bisect(lambda s: capped_mean(anchor - s * z, s, cap) - mean, 1e-9, high)
    return anchor - sigma * z, sigma


def _bisect(func: Callable[[float], float], low: float, high: float, steps: int = 100) -> float:
    """The root of a decreasing `func` on [low, high], or the end nearer to it."""
    if func(low) <= 0:
        return low
    if func(high) >= 0:
        return high
    for _ in range(steps):
        middle = (low + high) / 2
        if func(middle) > 0:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def sample_fit(fit: pd.DataFrame, *, samples_per_step: int = 1024, seed: int = 0) -> pd.DataFrame:
    """A trace of `samples_per_step` samples per fitted step: step, response_tokens, capped."""
    rng = np.random.default_rng(seed)
    inverse = np.vectorize(_NORMAL.inv_cdf, otypes=[float])
    parts = []
    for record in fit.itertuples(index=False):
        uniform = (np.arange(samples_per_step) + rng.random(samples_per_step)) / samples_per_step
        z = inverse(np.clip(rng.permutation(uniform), 1e-12, 1 - 1e-12))
        raw = np.exp(record.mu + record.sigma * z)
        lengths = np.clip(np.rint(raw), 1, record.max_tokens).astype("int64")
        parts.append(
            pd.DataFrame(
                {
                    "step": record.step,
                    "response_tokens": lengths,
                    "capped": lengths >= record.max_tokens,
                }
            )
        )
    return pd.concat(parts, ignore_index=True).astype({"step": "int64"})


def fit_trace(
    path: str | Path,
    *,
    samples_per_step: int = 1024,
    max_tokens: int | None = None,
    seed: int = 0,
    column_map: Mapping[str, str] | Iterable[str] | None = None,
) -> pd.DataFrame:
    """Read a step summary, fit it and sample a trace from the fit (see the module docstring)."""
    if samples_per_step < 1:
        raise TraceError(f"samples per step must be at least 1, not {samples_per_step}")
    if seed < 0:
        raise TraceError(f"seed must be 0 or more, not {seed}")
    summary = read_summary(path, as_column_map(column_map, targets=SUMMARY_ALIASES))
    fit = fit_summary(summary, samples_per_step=samples_per_step, max_tokens=max_tokens, file=path)
    return sample_fit(fit, samples_per_step=samples_per_step, seed=seed)
