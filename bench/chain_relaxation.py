"""Chain relaxation bench: a study's jobs as chains of steps on a pool reduced to its scarce parts.

The ceiling of `rlix-sim compare` lets the job that ends last have every GPU while the others
train. Where every training gang takes more than half the pool (blog-4on12: each job trains on
8 of 12 GPUs) the gangs and the inits must take turns, and while one runs only the GPUs it
leaves can roll out. This bench keeps exactly that and each job's chain of steps, and makes
everything else as cheap as it can be:

- one gang resource: each job's init (its measured seconds, once the weights are read) and each
  step's gang stages (old log-probs, training and the like, their measured seconds, one after
  another) hold it; while it is held `ranks in gang` rollout ranks exist (the GPUs it leaves
  over the rollout TP), else `ranks` (the pool over the TP);
- staleness pacing: step s may roll out once version s - k is published (k the pipeline's
  `max_staleness`; version 0 at the init's end); its gang stages follow its rollout and the
  previous step's publish, and its publish (and checkpoint) follows them, on no GPU;
- a rollout is done after its `price` seconds on one rank the job holds; any of a job's
  released steps progress together on that one rank, and moves cost nothing.

Prices: `longest` charges a step its longest trajectory decoded alone (batch 1 at every
iteration, the KV it reads, prefill left out): no rank can run that trajectory faster, so every
real schedule is one of the model's and the model's shortest makespan is a bound. `one-rank`
charges the whole step decoded together on one rank from the start (bench/packing.py's price;
an estimate, not a bound), and `one-rank+load` adds one weight load a step.

The schedule is greedy (not the model's optimum): when the gang resource frees, waiting inits
go first, then the ready step of the job with the most chain left (its gangs, publishes and its
current rollout's price); the ranks go to the jobs with the most chain left. Its makespan is
an upper bound on the model's shortest, so its share of the ceiling is a floor on what the
model allows: where it reaches a target, this model cannot prove the target out of reach.
Deterministic (the trajectories and stage seconds are the simulator's, the same under every
policy); about 10 s a seed.

    python bench/chain_relaxation.py                          # blog-4on12, seeds 0-7, every price
    python bench/chain_relaxation.py --prices longest --seeds 2 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling bench, packing

from rlix.policy.specs import PipelineKind  # noqa: E402
from rlix.sim.choices import add_study_arguments, means_over_seeds  # noqa: E402
from rlix.sim.parallel import run_all  # noqa: E402

DEFAULT_SCENARIOS = ("blog-4on12",)
PRICES = ("longest", "one-rank", "one-rank+load")
GANG_COLUMNS = ("values_s", "old_log_probs_s", "ref_log_probs_s", "critic_train_s", "actor_train_s")
EPS = 1e-9


@dataclass(frozen=True)
class Chain:
    """One job: its init's seconds, and per step its rollout price, gang seconds and the
    seconds after its gangs before its next version exists (publish and checkpoint)."""

    job: str
    init_s: float
    rollout_s: tuple[float, ...]
    gang_s: tuple[float, ...]
    publish_s: tuple[float, ...]
    max_staleness: int


@dataclass
class _Job:
    chain: Chain
    phase: str = "init_wait"  # init_wait, init, batch, gang, publish, done
    step: int = 0
    phase_end_s: float = 0.0
    released: int = 0  # steps 0..released-1 may roll out
    left: list[float] = field(default_factory=list)  # each step's rollout seconds still to run

    def chain_left_s(self) -> float:
        c, s = self.chain, self.step
        rollout = self.left[s] if s < len(c.rollout_s) else 0.0
        return sum(c.gang_s[s:]) + sum(c.publish_s[s:]) + rollout


def greedy_makespan(chains: list[Chain], release_s: float, num_ranks: int,
                    num_ranks_in_gang: int) -> tuple[float, dict[str, float]]:
    """The greedy schedule of the model (module docstring): its makespan, and each job's end.
    Inits may start at `release_s`."""
    jobs = [_Job(c, left=list(c.rollout_s)) for c in chains]
    ends: dict[str, float] = {}
    t = 0.0
    gang: _Job | None = None
    while len(ends) < len(jobs):
        for j in jobs:  # phases ending now
            if j.phase in ("init", "gang", "publish") and j.phase_end_s <= t + EPS:
                _advance(j, t)
                if j.phase == "done":
                    ends[j.chain.job] = t
                if gang is j and j.phase != "gang":
                    gang = None
        if len(ends) == len(jobs):
            break
        if gang is None:
            gang = _start_gang(jobs, t, release_s)
        cap = num_ranks_in_gang if gang is not None else num_ranks
        rolling = [j for j in jobs if j.phase != "init_wait" and j.phase != "init" and _open(j)]
        rolling.sort(key=lambda j: (-j.chain_left_s(), j.chain.job))
        holders = rolling[:cap]
        nexts = [j.phase_end_s for j in jobs if j.phase in ("init", "gang", "publish")]
        nexts += [min(x for x in _open(j)) + t for j in holders]
        if gang is None and any(j.phase == "init_wait" for j in jobs) and t < release_s:
            nexts.append(release_s)
        if not nexts:
            raise ValueError("the model is stuck: a step waits for a rollout no rank may run")
        dt = min(nexts) - t
        for j in holders:
            for s in range(j.released):
                if j.left[s] > EPS:
                    j.left[s] = max(0.0, j.left[s] - dt)
        t += dt
    return max(ends.values()), ends


def _open(job: _Job) -> list[float]:
    """The unfinished rollout seconds of a job's released steps."""
    return [x for x in job.left[:job.released] if x > EPS]


def _advance(job: _Job, t: float) -> None:
    c = job.chain
    if job.phase == "init":
        job.phase = "batch"
        job.released = min(len(c.rollout_s), c.max_staleness + 1)
    elif job.phase == "gang":
        job.phase, job.phase_end_s = "publish", t + c.publish_s[job.step]
    elif job.phase == "publish":
        job.step += 1
        # version step exists: step s rolls out once version s - k does
        job.released = min(len(c.rollout_s), job.step + c.max_staleness + 1)
        job.phase = "done" if job.step == len(c.rollout_s) else "batch"


def _start_gang(jobs: list[_Job], t: float, release_s: float) -> _Job | None:
    """The next holder of the gang resource: a waiting init first, else the ready step of the
    job with the most chain left; None when nothing is ready."""
    if t >= release_s - EPS:
        for j in jobs:
            if j.phase == "init_wait":
                j.phase, j.phase_end_s = "init", t + j.chain.init_s
                return j
    ready = [j for j in jobs if j.phase == "batch" and j.left[j.step] <= EPS]
    if not ready:
        return None
    j = min(ready, key=lambda j: (-j.chain_left_s(), j.chain.job))
    j.phase, j.phase_end_s = "gang", t + j.chain.gang_s[j.step]
    return j


def _model(scenario: Any) -> tuple[int, int, int]:
    """(rollout TP, ranks, ranks beside a gang) of a scenario the model fits; ValueError else."""
    from packing import wide_gangs

    shape = wide_gangs(scenario)
    if shape is None or {p.kind for p in scenario.pipelines} != {PipelineKind.FULL_FINETUNE}:
        raise ValueError(f"{scenario.name}: the chain model needs full-finetune jobs whose training gangs"
                         " all take more than half the pool, and one rollout TP")
    tp, width = shape
    return tp, scenario.num_gpus // tp, (scenario.num_gpus - width) // tp


def chains_of_run(scenario: Any, folder: Path, price: str) -> tuple[list[Chain], float]:
    """Each job's chain from a run folder (the stage seconds and trajectories are the same under
    every policy), and when the first init started (the weights read)."""
    import pandas as pd
    from packing import one_rank_gpu_s

    from rlix.sim.costs import CostModel

    tp = _model(scenario)[0]
    rollouts = pd.read_parquet(folder / "rollouts.parquet")
    rollouts = rollouts[rollouts["status"] == "completed"]
    steps = pd.read_parquet(folder / "steps.parquet")
    activity = pd.read_parquet(folder / "activity.parquet")
    inits = activity[activity["stage"] == "init"]
    chains = []
    for pipeline in scenario.pipelines:
        costs = CostModel.for_model(pipeline.model, scenario.topology_config.gpu, scenario.costs)
        alpha, beta = costs.decode_coefficients(1, tp)
        mine = rollouts[rollouts["pipeline_id"] == pipeline.id]
        prices = []
        for _step, g in sorted(mine.groupby("step_consumed", observed=True), key=lambda kv: kv[0]):
            n = g["response_tokens"].to_numpy(dtype=float)
            p = g["prompt_tokens"].to_numpy(dtype=float)
            if price == "longest":
                prices.append(float((n * alpha + beta * (p * n + n * (n - 1) / 2)).max()))
            else:
                one = one_rank_gpu_s(costs, tp, scenario.engine.max_batch,
                                     [(g["prompt_tokens"].to_numpy(), g["response_tokens"].to_numpy())]) / tp
                prices.append(one + (costs.weight_load_seconds(tp) if price == "one-rank+load" else 0.0))
        st = steps[steps["pipeline_id"] == pipeline.id].sort_values("step")
        mine_inits = inits[inits["pipeline_id"] == pipeline.id]
        chains.append(Chain(
            job=pipeline.id, init_s=float((mine_inits["t_end"] - mine_inits["t_start"]).max()),
            rollout_s=tuple(prices), gang_s=tuple(float(x) for x in st[list(GANG_COLUMNS)].sum(axis=1)),
            publish_s=tuple(float(x) for x in st["sync_s"] + st["checkpoint_s"]),
            max_staleness=pipeline.max_staleness))
    return chains, float(inits["t_start"].min())


def run_one(name: str, seed: int, prices: tuple[str, ...]) -> dict[str, Any]:
    from rlix.scenarios import load_scenario
    from rlix.sim.compare import compare

    scenario = load_scenario(name).model_copy(update={"seed": seed})
    _tp, num_ranks, num_ranks_in_gang = _model(scenario)
    with tempfile.TemporaryDirectory() as out:
        comparison = compare(scenario, ["rlix"], out=Path(out))
        folder = comparison.run_dirs["rlix"]
        assert folder is not None
        row: dict[str, Any] = {"scenario": name, "seed": seed, "ceiling_makespan_s": comparison.makespan_bound_s()}
        for price in prices:
            chains, release_s = chains_of_run(scenario, folder, price)
            row[f"{price}_makespan_s"] = greedy_makespan(chains, release_s, num_ranks, num_ranks_in_gang)[0]
    return row


def bench(names: list[str], prices: tuple[str, ...], seeds: int, workers: int, quiet: bool) -> list[dict[str, Any]]:
    """One row per (scenario, price): the greedy makespan and its share of the ceiling (ceiling
    makespan / makespan), the mean over seeds and the range."""
    runs = run_all(run_one, [(name, seed, prices) for name in names for seed in range(seeds)], workers, quiet)
    rows = []
    for name in names:
        mine = [r for r in runs if r["scenario"] == name]
        for price in prices:
            shares = [r["ceiling_makespan_s"] / r[f"{price}_makespan_s"] for r in mine]
            rows.append({"scenario": name, "price": price, "relaxation": price == "longest",
                         "makespan_s": fmean(r[f"{price}_makespan_s"] for r in mine),
                         "ceiling_makespan_s": fmean(r["ceiling_makespan_s"] for r in mine),
                         "of_ceiling": fmean(shares), "min_of_ceiling": min(shares), "max_of_ceiling": max(shares)})
    return rows


def _prices(text: str) -> tuple[str, ...]:
    names = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in names if p not in PRICES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown) or 'nothing'} (known: {', '.join(PRICES)})")
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_study_arguments(parser, DEFAULT_SCENARIOS)
    parser.add_argument("--prices", type=_prices, default=",".join(PRICES),
                        help=f"rollout prices, separated by commas (default: {','.join(PRICES)})")
    parser.add_argument("--json", action="store_true", help="one JSON line: {\"rows\": [...]}")
    args = parser.parse_args()
    from rlix.scenarios import load_scenario

    for name in args.scenarios:
        try:
            _model(load_scenario(name))
        except ValueError as error:
            parser.error(str(error))
    rows = bench(args.scenarios, args.prices, args.seeds, args.workers, quiet=args.json)
    if args.json:
        print(json.dumps({"rows": rows}))
        return 0
    import pandas as pd

    from rlix.runs.text import format_table

    share = "{:.1%}"
    formats = {"makespan_s": "{:,.0f}", "ceiling_makespan_s": "{:,.0f}", "of_ceiling": share,
               "min_of_ceiling": share, "max_of_ceiling": share}
    print(f"{means_over_seeds(args.seeds)}; the greedy schedule of the chain model (relaxation: whether at that price"
          " the model is a relaxation of every real schedule)")
    print(format_table(pd.DataFrame(rows), formats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
