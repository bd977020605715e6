"""How many simulated rollouts per wall-second the closed-form rollout engines replay.

Pushes `--trajectories` rollouts (prompt and response lengths drawn with replacement from a
bundled trace) through `--groups` rollout groups of 8-16 engines each, one step at a time
(`--prompts` x `--samples` trajectories per step, one batch id per step), while ranks are
removed and added back (after a weight load) every `--churn-s` simulated seconds. The driver
advances each group in slices of `--slice-s` simulated seconds, as the SimPy driver does between
policy events. Prints rollouts per wall-second, per CPU-second of this thread (the figure to
trust on a shared machine, where wall time includes other processes' turns) and the counts
behind them; with `--json`, only one JSON line of them.

    .venv/bin/python bench/engine_speed.py [--trajectories 200000] [--profile] [--json]

Measured on the 2-core development VM (a plain loop turn 32-33 ns), 2026-11-24, 221,184
rollouts, 7B at TP1, max_batch 256, per CPU-second of the bench's thread, the compiled engines
(rlix/sim/_engine.pyx; the pure-Python engines they replaced did 233k on the default line):

    (default: agentic_small, 8-16 engines)                    ~4.1M rollouts/s (1.25 attempts
                                                              per rollout: KV-saturated ranks)
    --trace math_small                                        ~7.1M
    --min-engines 32 --max-engines 32                         ~4.9M
    --trace math_small --min-engines 32 --max-engines 32      ~6.5M
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import math
import pstats
import time

import numpy as np

from rlix.sim.costs import CostModel
from rlix.sim.engine import RolloutGroup
from rlix.traces import bundled_names, load_bundled
from rlix.traces.options import non_negative_int, positive_int, positive_number


def python_speed_ns() -> float:
    """CPU nanoseconds per turn of a plain Python loop (best of 5), to compare figures taken
    on machines of different speed or load: a quiet current x86 core takes about 30-40."""
    best = math.inf
    for _ in range(5):
        cpu0 = time.thread_time()
        total = 0
        for i in range(200_000):
            total += i
        best = min(best, (time.thread_time() - cpu0) / 200_000 * 1e9)
    return round(best, 1)


def run(args: argparse.Namespace) -> dict[str, float | int | str]:
    rng = np.random.default_rng(args.seed)
    trace = load_bundled(args.trace)
    prompts_all = trace["prompt_tokens"].to_numpy(np.int64)
    responses_all = trace["response_tokens"].to_numpy(np.int64)
    costs = CostModel.for_model(args.model)
    capacity = costs.kv_capacity_tokens(args.tp)
    load_s = costs.weight_load_seconds(args.tp)
    per_step = args.prompts * args.samples
    num_steps = -(-args.trajectories // (per_step * args.groups))
    groups = []
    for _ in range(args.groups):
        g = RolloutGroup(costs, args.tp, args.max_batch, capacity)
        for rank in range(int(rng.integers(args.min_engines, args.max_engines + 1))):
            g.add_engine(rank, 0.0)
        groups.append(g)
    picks = rng.integers(0, len(trace), size=(args.groups, num_steps, per_step))
    churn_draws = rng.random(size=100_000)
    num_done = num_attempts = num_removed = num_events = 0
    gc.collect()
    wall0 = time.perf_counter()
    cpu0 = time.thread_time()
    for gi, g in enumerate(groups):
        next_id = 0
        draw = gi * 1000
        for step in range(num_steps):
            pick = picks[gi, step]
            ids = np.arange(next_id, next_id + per_step)
            next_id += per_step
            g.submit(ids, prompts_all[pick], responses_all[pick], np.full(per_step, step))
            next_churn = g.now + args.churn_s
            while True:
                t, reason = g.advance(min(g.now + args.slice_s, next_churn))
                num_events += 1
                if reason == "batch_done":
                    g.done_batches()
                    break
                if reason == "idle":
                    raise RuntimeError("group idle with its batch not done")
                if t >= next_churn:
                    # A shrink and an expand: one rank leaves, a new one joins after a weight load.
                    ranks = g.engines
                    victim = ranks[int(churn_draws[draw % len(churn_draws)] * len(ranks))]
                    draw += 1
                    num_removed += g.remove_engine(victim, t)
                    g.add_engine(max(ranks) + 1, t + load_s)
                    next_churn = t + args.churn_s
            attempts = g.drain_attempt_columns()
            if attempts is not None:
                num_attempts += len(attempts["completed"])
                num_done += int(attempts["completed"].sum())
            g.drain_busy()
    wall = time.perf_counter() - wall0
    cpu = time.thread_time() - cpu0
    return {
        "bench": "engine_speed",
        "python_loop_ns": python_speed_ns(),
        "rollouts_per_wall_s": round(num_done / wall),
        "rollouts_per_cpu_s": round(num_done / cpu),
        "rollouts": num_done,
        "attempts": num_attempts,
        "requeued_by_removal": num_removed,
        "advance_calls": num_events,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "simulated_s": round(max(g.now for g in groups), 1),
        "model": args.model,
        "engines": f"{args.min_engines}-{args.max_engines}",
        "trace": args.trace,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="engine_speed.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trajectories", type=positive_int, default=200_000,
                        help="rollouts to push through, at least (default 200000; about a second)")
    parser.add_argument("--groups", type=positive_int, default=3, help="rollout groups (default 3)")
    parser.add_argument("--prompts", type=positive_int, default=512, help="prompts per step (default 512)")
    parser.add_argument("--samples", type=positive_int, default=16, help="samples per prompt (default 16)")
    parser.add_argument("--trace", default="agentic_small", help="a bundled trace (default agentic_small)")
    parser.add_argument("--model", default="7b", help="the cost model's model size (default 7b)")
    parser.add_argument("--tp", type=positive_int, default=1, help="tensor parallel size of a rank (default 1)")
    parser.add_argument("--max-batch", type=positive_int, default=256,
                        help="sequences a rank decodes at once (default 256)")
    parser.add_argument("--slice-s", type=positive_number, default=5.0,
                        help="simulated seconds a group advances per call (default 5)")
    parser.add_argument("--churn-s", type=positive_number, default=60.0,
                        help="simulated seconds between a rank removed and one added (default 60)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="random seed (default 0)")
    parser.add_argument("--min-engines", type=positive_int, default=8, help="fewest engines a group (default 8)")
    parser.add_argument("--max-engines", type=positive_int, default=16, help="most engines a group (default 16)")
    parser.add_argument("--profile", action="store_true", help="cProfile the run (slower)")
    parser.add_argument("--json", action="store_true", help="one JSON line of the figures")
    args = parser.parse_args(argv)
    if args.trace not in bundled_names():
        parser.error(f"--trace: no bundled trace {args.trace!r} (bundled: {', '.join(bundled_names())})")
    try:
        CostModel.for_model(args.model).kv_capacity_tokens(args.tp)
    except ValueError as error:
        parser.error(f"--model {args.model} --tp {args.tp}: {error}")
    if args.min_engines > args.max_engines:
        parser.error(f"--min-engines {args.min_engines} is more than --max-engines {args.max_engines}")
    if args.profile:
        profiler = cProfile.Profile()
        result = profiler.runcall(run, args)
        if not args.json:
            pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
    else:
        result = run(args)
    if args.json:
        print(json.dumps(result))
    else:
        print(report(result))


def report(r: dict[str, float | int | str]) -> str:
    """The figures as text: the rates first, then the counts behind them."""
    return (
        f"{r['rollouts_per_cpu_s']:,} rollouts per CPU-s ({r['cpu_s']} s CPU), "
        f"{r['rollouts_per_wall_s']:,} per wall-s ({r['wall_s']} s)\n"
        f"{r['rollouts']:,} rollouts ({r['attempts']:,} attempts, {r['requeued_by_removal']:,} re-queued by "
        f"removals) on the {r['trace']} trace, {r['model']}, {r['engines']} engines per group\n"
        f"{r['advance_calls']:,} advance calls, {r['simulated_s']:,} simulated s; "
        f"a plain Python loop turn {r['python_loop_ns']} ns"
    )


if __name__ == "__main__":
    main()
