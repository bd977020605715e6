"""The fidelity check's report: the summary of the errors over configs, the bench's table, and
the notebook's tables (fitted constants, one config's figures, every config's errors, the
verdict against the targets). The runs themselves are `rlix.studies.fidelity`'s."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    import pandas as pd

#: The targets of the check: median step-time error, median makespan error, and none (of
#: either, in any config) over the last.
TARGETS = {"median_step_time_error": 0.05, "median_makespan_error": 0.10, "max_error": 0.15}


def chosen_configs(parser: argparse.ArgumentParser, text: str, known: Iterable[str]) -> list[str]:
    """The comma-separated config names of a bench's `--configs`, each one of `known` (else the
    parser's one-line error)."""
    known = list(known)
    names = [n for n in text.split(",") if n]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        what = f"unknown {', '.join(unknown)}" if unknown else "no configuration named"
        parser.error(f"--configs: {what} (known: {', '.join(known)})")
    return names


def check_out_option(parser: argparse.ArgumentParser, out: str | Path) -> None:
    """A bench's `--out` folder, checked before any run: the parser's one-line error if it is
    a file, lies under one or cannot be written (the first run's mkdir raised a traceback)."""
    from rlix.runs.errors import RunError
    from rlix.runs.paths import check_writable

    try:
        check_writable(out)
    except RunError as exc:
        parser.error(f"--out: {exc}")


def json_line_stdout(enabled: bool) -> TextIO:
    """Where a bench prints its result: with `--json` (`enabled`) the process's stdout, which then
    carries that one line only, everything else printed (Ray's workers print to this process's
    stdout) going to stderr from here on."""
    if not enabled:
        return sys.stdout
    stdout = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    return stdout


def summarize(rows: list[dict[str, Any]], cal_dir: Path, costs: Path, plot: Path, wall_s: float) -> dict[str, Any]:
    report = {"configs": rows, "calibration_run": str(cal_dir), "costs": str(costs), "plot": str(plot),
              "wall_s": wall_s}
    for suffix in ("", "_contention", "_contention_simc", "_cpu"):
        stats = error_stats(rows, suffix=suffix)
        if suffix and stats[f"median_makespan_error{suffix}"] is None:
            continue
        report.update(stats)
    return report


def error_stats(rows: list[dict[str, Any]], suffix: str = "", prefix: str = "") -> dict[str, float | None]:
    """Median and max of the rows' makespan and step-time errors (`makespan_error<suffix>`, ...),
    as `<prefix>median_makespan_error<suffix>`, ...; None where no row has the figure."""
    out: dict[str, float | None] = {}
    for figure in ("makespan_error", "step_time_error"):
        values = [r[f"{figure}{suffix}"] for r in rows if r.get(f"{figure}{suffix}") is not None]
        out[f"{prefix}median_{figure}{suffix}"] = statistics.median(values) if values else None
        out[f"{prefix}max_{figure}{suffix}"] = max(values) if values else None
    return out


def print_table(report: dict[str, Any]) -> None:
    print(f"{'config':<16} {'makespan pred/meas s':>22} {'err':>6} {'step err':>9} "
          f"{'busy p/m':>12} {'loading p/m':>12} {'idle p/m':>12} {'preempt p/m':>12}")
    for r in report["configs"]:
        shares = "".join(f" {r[f'{s}_pred']:>5.0%}/{r[f'{s}_meas']:<5.0%}" for s in ("busy_share", "loading_share", "idle_share"))
        print(f"{r['name']:<16} {r['makespan_pred_s']:>10.1f}/{r['makespan_meas_s']:<10.1f} {r['makespan_error']:>6.1%} "
              f"{r['step_time_error']:>9.1%} {shares} {r['preemptions_pred']:>5}/{r['preemptions_meas']:<5}")
        if r.get("makespan_error_contention") is not None:
            print(f"{'  +contention':<16} {r['makespan_pred_s_contention']:>10.1f}/{r['makespan_meas_s']:<10.1f} "
                  f"{r['makespan_error_contention']:>6.1%} {r['step_time_error_contention']:>9.1%}  "
                  f"C pred {r['concurrency_runs']} meas {r['concurrency_meas']:.2f}")
        if r.get("makespan_error_cpu") is not None:
            print(f"{'  +cpu work':<16} {r['makespan_pred_s_cpu']:>10.1f}/{r['makespan_meas_s']:<10.1f} "
                  f"{r['makespan_error_cpu']:>6.1%} {r['step_time_error_cpu']:>9.1%}  "
                  f"op constants x{r['cpu_factors'][-1]:.2f}")
    print(f"median step-time error {report['median_step_time_error']:.1%}, "
          f"median makespan error {report['median_makespan_error']:.1%}, max {report['max_makespan_error']:.1%}; "
          f"plot {report['plot']}; {report['wall_s']:.0f} s")


def fit_table(costs: Path) -> pd.DataFrame:
    """The cost file's fitted constants: value, RMS residual of its fit (s) and samples."""
    import pandas as pd

    from rlix.scenarios.costs import read_costs_file

    fits = read_costs_file(costs).fits
    return pd.DataFrame([{"constant": name, "value": f.value, "residual_s": f.residual_s, "samples": f.samples}
                         for name, f in fits.items()]).set_index("constant")


def comparison_table(row: dict[str, Any]) -> pd.DataFrame:
    """One config (a `compare` row): predicted, measured and |pred - meas| / meas of each figure."""
    import pandas as pd

    lines = [("makespan s", row["makespan_pred_s"], row["makespan_meas_s"], row["makespan_error"])]
    for pid, error in row["step_time_errors"].items():
        lines.append((f"mean step s: {pid}", row[f"step_time_pred_s.{pid}"], row[f"step_time_meas_s.{pid}"], error))
    for share in ("busy_share", "loading_share", "idle_share"):
        lines.append((share.replace("_", " "), row[f"{share}_pred"], row[f"{share}_meas"], row[f"{share}_error"]))
    lines.append(("preemptions", row["preemptions_pred"], row["preemptions_meas"], row["preemptions_error"]))
    return pd.DataFrame(lines, columns=["figure", "predicted", "measured", "error"]).set_index("figure")


def error_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """One line per config: its errors, |pred - meas| / meas (step time: the mean over its
    pipelines, and the worst pipeline's), and the rescaled predictions' beside them (to the
    other work's load; with a slowdown fitted across concurrencies, to the config's concurrency)."""
    import pandas as pd

    lines = []
    for r in rows:
        known = [e for e in r["step_time_errors"].values() if e is not None]
        lines.append({"config": r["name"], "makespan": r["makespan_error"], "step time": r["step_time_error"],
                      "worst step time": max(known) if known else None, "busy": r["busy_share_error"],
                      "loading": r["loading_share_error"], "idle": r["idle_share_error"],
                      "preemptions": r["preemptions_error"],
                      "makespan (load)": r.get("makespan_error_load"), "step time (load)": r.get("step_time_error_load")})
        if any(row.get("makespan_error_contention") is not None for row in rows):  # calibrated on two concurrencies
            lines[-1].update({"makespan (contention)": r.get("makespan_error_contention"),
                              "step time (contention)": r.get("step_time_error_contention")})
        if any(row.get("makespan_error_cpu") is not None for row in rows):  # and bound by CPU work
            lines[-1].update({"makespan (cpu work)": r.get("makespan_error_cpu"),
                              "step time (cpu work)": r.get("step_time_error_cpu")})
    return pd.DataFrame(lines).set_index("config").astype(float)


def verdict(errors: pd.DataFrame) -> dict[str, tuple[float, float, bool]]:
    """Each target of `TARGETS` against an `error_table`: (value, target, met). NaN: unknown."""
    import math

    step, span = errors["step time"].median(), errors["makespan"].median()
    worst = errors[["makespan", "step time"]].max().max()
    found = {"median_step_time_error": step, "median_makespan_error": span, "max_error": worst}
    return {name: (float(value), TARGETS[name], not math.isnan(value) and value <= TARGETS[name])
            for name, value in found.items()}
