"""Does the simulator, calibrated on one live run, predict live runs it has not seen?

1. Run the bundled cpu-demo live on the CPU executor (tiny Qwen2, hf backend, 4 declared GPUs)
   and calibrate the simulator on it (`rlix-sim calibrate`: cost constants, and the run's
   rollout lengths as the trace the simulator replays).
2. For each unseen config (variants of cpu-demo: a pipeline added, two declared GPUs instead of
   four, staleness 1 everywhere, the static policy), run it live and in the calibrated
   simulator, and set the two side by side: makespan, mean step time per pipeline, busy /
   loading / idle shares of the pool, preemptions; errors are |pred - meas| / meas (shares:
   the absolute difference in points as well).
3. Draw sim_vs_exec.png: the Gantt of one predicted run over its live run.

Both drivers get the same scenario, its `engine:` section included (cpu-demo's: a rank takes
up to 8 trajectories a call, no balancing router, no migration, as both drivers run it). The machine has 2 cores, shared with whatever else runs. The prediction uses the constants as
calibrated. Reported beside it: the other work's CPU demand probed for 3 s before each live
run (the calibration too; rlix.executor.machine) and the prediction rescaled to it
(rlix.sim.calibrate.costs_for_background, `*_error_load`), and in hindsight to the demand the
live run measured (`*_error_hindsight`; not a prediction). On this machine neither rescaling
has helped consistently (docs/calibration.md). With `--concurrency-fit three-gpus` the
calibration also runs cpu-demo on three declared GPUs live, fits the per-op slowdown against
the run's concurrency across the two (rlix.sim.concurrency), and each config is predicted
again with the constants rescaled to its own concurrency: `*_error_contention` (the
concurrency as the live calibration runs had it) and `*_error_contention_simc` (as the
simulator counts it in replays of the calibration configs: like with like), beside the errors
as before. The calibration run (or both) also gives the CPU work of a live run
(rlix.sim.cpu_work: CPU seconds per step trained and per rollout worker started, each worker
reporting what its start took; written to cpu_work.json), and when the calibration kept the
machine's cores busy each config is predicted once more with the simulator's op constants
scaled until its makespan is the config's CPU work over the cores (`*_error_cpu`). The parts
are rlix.studies.fidelity's, which notebooks/sim_vs_exec.ipynb shows step by step.

    .venv/bin/python bench/fidelity.py [--out DIR] [--configs two-gpus,static] [--concurrency-fit three-gpus]
                                       [--steps N] [--backend hf|vllm] [--model tiny|DIR] [--json]

On NVIDIA GPUs the same bench runs the live side on real devices: `--backend vllm` (rollout on
vLLM; needs 4 CUDA devices, as cpu-demo declares 4 GPUs, and `pip install 'rlix[gpu]'`), and
`--model DIR` for a local model directory instead of the tiny built-in one. The machine check
comes first: without CUDA devices, `--backend vllm` stops with one line and runs nothing.

`--json` prints one line: {"configs": [{"name", "makespan_error", "step_time_error", ...}],
"median_step_time_error", "max_makespan_error", ...}. Takes ~5 minutes on 2 cores (~6 with --concurrency-fit).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rlix.studies.fidelity import (
    VARIANTS,
    Variant,
    calibrate,
    compare,
    gpus_needed,
    live_backend_problem,
    plot_side_by_side,
    predict_and_run,
    run_live,
    run_sim,
    scenario_data,
)
from rlix.studies.fidelity_report import (
    check_out_option,
    chosen_configs,
    json_line_stdout,
    print_table,
    summarize,
)

__all__ = ["VARIANTS", "Variant", "calibrate", "compare", "main", "plot_side_by_side", "predict_and_run",
           "print_table", "run_live", "run_sim", "scenario_data", "summarize"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/fidelity", help="where run folders, costs and the plot go")
    parser.add_argument("--configs", default=",".join(VARIANTS), help=f"unseen configs, of {','.join(VARIANTS)}")
    parser.add_argument("--calibration-run", type=Path, help="calibrate on this live run folder instead of a new one")
    parser.add_argument("--concurrency-fit", metavar="SECOND", default=None,
                        help="calibrate on a second run too (three-gpus: cpu-demo on 3 declared GPUs, run live; or "
                             "a live run folder) and also predict with the per-op slowdown against run concurrency "
                             "(*_error_contention beside the errors as before)")
    parser.add_argument("--steps", type=int, default=None,
                        help="every pipeline (and adapter) this many steps instead of cpu-demo's 12, calibration "
                             "included: longer runs weigh start-up less in a mean step time")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the finished live runs already in --out (predict again, do not run again)")
    parser.add_argument("--backend", choices=("hf", "vllm"), default="hf",
                        help="rollout backend of the live runs: hf (transformers; CPU or GPU) or vllm (NVIDIA "
                             "GPUs only: as many CUDA devices as the configs declare, 4)")
    parser.add_argument("--model", default="tiny",
                        help="model of the live runs: tiny (built here, no download) or a local model directory")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args(argv)
    names = chosen_configs(parser, args.configs, VARIANTS)
    if args.steps is not None and args.steps < 1:
        parser.error("--steps: at least 1")
    check_out_option(parser, args.out)
    executor = {"backend": args.backend, "model": args.model}
    configs = [scenario_data(None)] + [scenario_data(VARIANTS[name]) for name in names]
    problem = live_backend_problem(args.backend, gpus_needed(configs))
    if problem is not None:
        parser.error(f"--backend {args.backend}: {problem}")
    if args.model != "tiny":
        from rlix.executor.ml.tiny_model import ModelSpecError, prepare_model

        try:
            prepare_model(args.model, args.out)
        except ModelSpecError as exc:
            parser.error(f"--model: {exc}")
    if args.calibration_run is not None:  # checked before --out is made: a bad folder is one line
        from rlix.runs.errors import RunError
        from rlix.sim.calibrate import read_run

        try:
            read_run(args.calibration_run)
        except (RunError, OSError, ValueError) as exc:
            parser.error(f"--calibration-run: {' '.join(str(exc).split())}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stdout = json_line_stdout(args.json)
    t0 = time.monotonic()
    cal_dir, costs, trace = calibrate(out, args.calibration_run, args.reuse, steps=args.steps,
                                      second=args.concurrency_fit, executor=executor)
    rows, first = [], None
    for name in names:
        row, sim_dir, live_dir = predict_and_run(name, out, costs, trace, args.reuse, steps=args.steps,
                                                 executor=executor)
        rows.append(row)
        first = first or (sim_dir, live_dir)
        print(f"{name}: done ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    assert first is not None
    import matplotlib

    matplotlib.use("Agg")
    plot = plot_side_by_side(*first, out / "sim_vs_exec.png")
    report = summarize(rows, cal_dir, costs, plot, time.monotonic() - t0)
    if args.json:
        print(json.dumps(report, sort_keys=True), file=stdout, flush=True)
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
