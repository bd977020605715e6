"""`rlix-sim calibrate RUN_DIR... --out costs.yaml`: the simulator's constants from live runs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rlix.traces.options import UsageError

CALIBRATE_HELP = """\
Fit the simulator's cost constants from one or more live executor run folders
(rlix-exec run ... --out DIR) and write them to a cost file that `rlix-sim run|compare
--costs FILE` or a scenario's `costs: FILE` applies. Each fitted constant is printed with the
root-mean-square residual of its fit (seconds) and how many measurements it used:

- decode: engine calls (iterations, sequences, prefill tokens) from rollouts;
- stages: forward passes and training steps, fixed + per batch token, from steps;
- weight moves: rollout-rank loads and offloads from activity; publish and checkpoint from
  steps; start-up: a pipeline's launch, its init holding per process started with it, and
  when its rollout workers came up (each first load that waited for one).

Contention. On a CPU machine the declared GPUs share a few cores. The fit measures it from the
activity table, each span of work against the spans running when it started, and reports the
slowdown per busy span with the share of the spread it explains; it is not applied: the spans
of the CPU executor are latency-bound (actor calls, worker wake-ups), and the work that does
share the cores, process start-up, is modelled per pipeline started together. Other work on
the machine is measured too: each live run records the CPU demand of its own processes and of
the rest (summary.json `machine`), the cost file keeps it, and
rlix.sim.calibrate.costs_for_background rescales the constants to another load.
Across runs: given runs of different concurrency (the time-weighted mean number of spans of
work running at once), the per-op slowdown against it is fitted and kept (`concurrency:`;
rlix.sim.concurrency.costs_at rescales the constants to another concurrency), and the
constants are given at the first run's. See docs/calibration.md.

A folder that lacks what a fit needs (no steps, no rollouts, no weight moves, no init), or a
simulator run folder, is refused in one line (--accept-simulated reads a simulator folder,
to check that the fit recovers the constants it ran with). Example:

  rlix-exec run cpu-demo --out runs/live
  rlix-sim calibrate runs/live --out costs.yaml --trace-out lengths.parquet
  rlix-sim run runs/live/scenario.yaml --costs costs.yaml --trace lengths.parquet

The constants are the runs' speeds, not their workload: a scenario keeps its own trace, so to
predict the runs give it their lengths (--trace-out's file; the command is printed last). A
live run's scenario.yaml says the rollout engine the executor ran (its `engine:` section).
"""


def calibrate_main(args: argparse.Namespace) -> int:
    from rlix.runs.paths import check_out_file
    from rlix.scenarios.costs import write_costs_file
    from rlix.sim.calibrate import fit_runs, write_trace

    out = check_out_file(args.out)
    trace_out = check_out_file(args.trace_out) if args.trace_out else None
    if trace_out is not None:  # before any fit or write: its format comes from its suffix
        from rlix.traces.io import format_of

        if trace_out.resolve() == out.resolve():
            raise UsageError("--trace-out: the same file as --out; the trace would replace the cost file")
        suffix = trace_out.suffix or "(none)"
        try:
            format_of(trace_out)
        except ValueError:
            raise UsageError(f"--trace-out {trace_out}: a trace is written as .parquet, .csv, .jsonl or .json, "
                             f"not {suffix}") from None
    calibration = fit_runs(args.run_dirs, accept_simulated=args.accept_simulated)
    print(f"{'constant':<28} {'value':>12} {'residual s':>11} {'samples':>8}")
    for fit in calibration.fits:
        print(f"{fit.name:<28} {fit.value:>12.6g} {fit.residual_s:>11.4g} {fit.samples:>8}")
    _print_contention(calibration.contention)
    _print_concurrency(calibration.concurrency)
    machine = calibration.machine
    if machine:
        print(f"machine: {machine['cores']:.0f} cores; the runs wanted {machine['own_demand']:.2f} of them, other work "
              f"{machine['background_demand']:.2f} (the constants hold at that load; costs_for_background rescales)")
        if "own_cores" in machine:
            print(f"         the runs used {machine['own_cores']:.2f} cores on average; the machine was "
                  f"{machine.get('machine_busy_share', float('nan')):.0%} busy (near 100%: the runs were bound by CPU work)")
    _print_cpu_by_role(args.run_dirs)
    driver = calibration.driver
    if driver.get("grants"):
        print(f"driver overhead: a grant is applied {driver['grant_latency_mean_s'] * 1e3:.2f} ms after it is decided "
              f"(mean; p95 {driver['grant_latency_p95_s'] * 1e3:.2f} ms, {driver['grants']} grants)")
    write_costs_file(calibration.costs_file(), out)
    print(f"cost file: {out}")
    if trace_out is not None:
        write_trace(args.run_dirs, trace_out)
        print(f"rollout lengths (a trace): {trace_out}")
    print(_how_to_predict(args.run_dirs[0], out, trace_out))
    return 0


def _how_to_predict(run_dir: str, out: Path, trace_out: Path | None) -> str:
    """The command that predicts the runs: a run's own scenario, which says the engine the
    executor ran, with the cost file and the runs' lengths. The constants alone leave a
    scenario its own trace: bundled cpu-demo replays math_small lengths (up to 4,096 tokens
    where the executor generated 16), a prediction several times the live run's."""
    trace = str(trace_out) if trace_out is not None else "FILE (the lengths --trace-out FILE writes)"
    scenario = Path(run_dir) / "scenario.yaml"
    return f"to predict these runs: rlix-sim run {scenario} --costs {out} --trace {trace}"


def _print_cpu_by_role(run_dirs: list[str]) -> None:
    """Each live run's CPU seconds by process role (summary.json `machine.own_cpu_by_role_s`)."""
    import json
    from pathlib import Path

    for run_dir in run_dirs:
        summary = json.loads((Path(run_dir) / "summary.json").read_text())
        roles = summary.get("machine", {}).get("own_cpu_by_role_s")
        if roles:
            parts = ", ".join(f"{role} {seconds:.1f}" for role, seconds in sorted(roles.items(), key=lambda kv: -kv[1]))
            print(f"         CPU-s by process, {Path(run_dir).name}: {parts}")


def _print_contention(fit: dict[str, Any]) -> None:
    if not fit.get("samples"):
        print("contention: no spans of work to fit")
        return
    print(f"contention: slowdown {fit['slowdown_per_busy']:.3g} per other busy span "
          f"(mean {fit['mean_concurrent']:.2f} running), explains {fit['explained']:.1%} of the spread "
          f"over {fit['samples']} spans; {fit['reason']}")


def _print_concurrency(fit: dict[str, Any]) -> None:
    runs = ", ".join(f"{r['concurrency']:.2f}" for r in fit.get("runs", []))
    if not fit.get("fitted"):
        print(f"across runs: concurrency {runs}; no per-op slowdown fitted ({fit.get('reason', '')})")
        return
    form = (f"1 + {fit['slope']:.3g} * (C - {fit['reference_concurrency']:.2f})" if fit["form"] == "linear"
            else f"max(1, C / {fit['effective_cores']:.2f}) relative to C = {fit['reference_concurrency']:.2f}")
    print(f"across runs: concurrency {runs}; per-op slowdown f(C) = {form} ({fit['form']}; relative rms: linear "
          f"{fit['relative_rms_linear']:.3f}, fair share {fit['relative_rms_fair_share']:.3f}, none "
          f"{fit['relative_rms_flat']:.3f}); the constants are at the first run's concurrency")


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "calibrate",
        help="fit the simulator's cost constants from live run folders into a cost file",
        description=CALIBRATE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_dirs", metavar="RUN_DIR", nargs="+", help="live executor run folders")
    parser.add_argument("--out", metavar="FILE", required=True, help="the cost file to write (YAML)")
    parser.add_argument("--trace-out", metavar="FILE",
                        help="also write the runs' completed rollout lengths as a trace (.parquet, .csv, .jsonl)")
    parser.add_argument("--accept-simulated", action="store_true",
                        help="read simulator run folders too (to check the fit against known constants)")
    parser.set_defaults(run=calibrate_main)


__all__ = ["UsageError", "register"]
