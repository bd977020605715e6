"""Differential check of the `gap-ratio` policy against RLix's own scheduling cycle.

Draws random situations (seeded): a pool of 4-16 GPUs in nodes of 4 or 8, one to five
pipelines registered in order, each with a rollout TP of 1, 2 or 4 and a random set of bundles
(sometimes offset so bundles of different pipelines overlap in part), some holding their
training gang, and each in one of five rollout states as RLix sees it:

- pending: a rollout request waits, with an estimate, and no progress report yet;
- reported: its rollout allocation exists (some of its ranks active, maybe none) and its
  progress report says R trajectories of T are left;
- silent: rolling, its request answered, nothing reported yet (RLix leaves it out);
- idle: not rolling out at all;
- releasing: its step's batch is in (its progress cleared) and it waits for the cycle to take
  back all its ranks (RLix's await-release at the next step's start; rlix's release of
  actor_infer).

Up to two pipelines not holding their training gang have asked for it (priorities 1-5, in
order) and wait for the cycle: granted at once on free GPUs, granted after preempting the
rollout ranks on its GPUs, or not granted because another gang holds some of them, when RLix
still preempts those ranks (its futile preemption) and the split hands their GPUs out again.

Each situation goes to one cycle of RLix's own scheduler (`SchedulerImpl.scheduling_cycle`,
stand-alone: bench/rlix_cycle_side.py, in its own process, on the checkout given with
--rlix) and, by the same events a driver would send, into rlix's `Scheduler` with the
`gap-ratio` policy, whose next round is then planned. Same allocations = every pipeline ends
with the same active dp ranks, and the same training requests are granted.

    python bench/rlix_differential.py --rlix ../rlix             # 2,000 situations, one line
    python bench/rlix_differential.py --rlix ../rlix --json      # one JSON line, first differences
    python bench/rlix_differential.py --rlix ../rlix --situations 500 --seed 3
    python bench/rlix_differential.py --rlix ../rlix --scenario lab-day-256   # states of a real run

With --scenario, the situations are the model's own states in a simulated run of a scenario
(every 15 minutes of its first three hours by default, `--at` to choose), staged the same way,
so the check covers the pools, homes and loads the studies have; RLix's cycle is timed on them.

RLix: github.com/rlops/rlix (its scheduler module needs only the standard library and Ray,
which rlix's `exec` extra installs; nothing of RLix is installed).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any, NoReturn

from rlix.policy import (
    ClusterReleased,
    ClusterRequested,
    ClusterSpec,
    DecisionApplied,
    PipelineAdmitted,
    PipelineKind,
    PipelineRegistered,
    PipelineSpec,
    RolloutProgressed,
    Scheduler,
    Tick,
    Topology,
)
from rlix.policy.decisions import Expand, Grant
from rlix.policy.gap_ratio import plan_gap_ratio
from rlix.policy.policies import GapRatioPolicy
from rlix.traces.options import non_negative_number, positive_int, separated_by_commas

SCHEDULER = "rlix/scheduler/scheduler.py"
STATES = ("pending", "pending", "reported", "reported", "reported", "reported", "silent", "idle", "releasing")
REQUEST_PRIORITIES = (1, 2, 3, 4, 5)  # actor training to value compute (init is a new pipeline's)


def situation(rng: random.Random) -> dict[str, Any]:
    gpn = rng.choice((4, 8))
    num_gpus = gpn * rng.choice((1, 2))
    taken: set[int] = set()  # GPUs under a training gang or an active rank
    pipelines: list[dict[str, Any]] = []
    for i in range(rng.randint(1, 6)):
        tp = rng.choice([t for t in (1, 2, 4) if t <= gpn])
        offset = rng.randrange(0, gpn - tp + 1) if rng.random() < 0.3 else 0
        bundles = [list(range(n * gpn + s, n * gpn + s + tp))
                   for n in range(num_gpus // gpn) for s in range(offset, gpn - tp + 1, tp)]
        chosen = sorted(rng.sample(bundles, rng.randint(1, len(bundles))))
        train = sorted(rng.sample(range(num_gpus), rng.randint(1, rng.choice((2, 2, num_gpus // 2)))))
        holds = rng.random() < 0.3 and taken.isdisjoint(train)
        if holds:
            taken |= set(train)
        total = rng.randint(1, rng.choice((8, 40, 500)))  # small totals make ties and halves
        pipelines.append({"id": f"p{i}", "tp": tp, "rollout": [g for b in chosen for g in b], "train": train,
                          "holds_train": holds, "state": rng.choice(STATES), "estimate": rng.randint(1, total),
                          "total": total, "remaining": rng.randint(0, total), "active": []})
    if rng.random() < 0.25:  # equal demands: shares that split a bundle in half, ties in the order
        for p in pipelines:
            p["total"] = p["remaining"] = p["estimate"] = pipelines[0]["total"]
    for p in rng.sample(pipelines, len(pipelines)):  # ranks of rolling pipelines, on what is left
        if p["state"] in ("reported", "silent", "releasing"):
            for rank in range(len(p["rollout"]) // p["tp"]):
                bundle = p["rollout"][rank * p["tp"]:(rank + 1) * p["tp"]]
                if rng.random() < 0.7 and taken.isdisjoint(bundle):
                    taken |= set(bundle)
                    p["active"].append(rank)
    # Training requests waiting for the cycle (FIFO within a priority), on GPUs that rollout ranks
    # hold (preempted), that are free, or that a training gang holds (not granted: the futile
    # preemption of RLix's cycle).
    free_to_ask = [p for p in pipelines if not p["holds_train"]]
    requests = [{"pipeline": p["id"], "priority": rng.choice(REQUEST_PRIORITIES)}
                for p in rng.sample(free_to_ask, min(len(free_to_ask), rng.choice((0, 0, 1, 1, 2))))]
    return {"num_gpus": num_gpus, "gpus_per_node": gpn, "pipelines": pipelines, "requests": requests}


class StagedGapRatio(GapRatioPolicy):
    """The RLix model, except while a situation is being set up: then a round plans nothing
    but the expansions it is told to make (`script`), so the state is exactly the situation."""

    def __init__(self) -> None:
        super().__init__()
        self.script: dict[str, list[int]] | None = {}
        self.quiet = False  # requests are being queued for the cycle: no round yet

    def round_ready(self, sched: Scheduler, event: Any) -> bool:
        if self.quiet:
            super().round_ready(sched, event)  # wakes the next cycle, as the request wakes RLix's
            return False
        return True if self.script is not None else super().round_ready(sched, event)

    def plan_rollout(self, sched: Scheduler) -> None:
        if self.script is None:
            plan_gap_ratio(sched)
            return
        for pipeline_id, ranks in self.script.items():
            for rank in ranks:
                sched.ledger.expand(sched.pipelines[pipeline_id].ranks[rank])
        self.script.clear()


def staged(s: dict[str, Any]) -> Scheduler:
    """The situation set up in a `Scheduler` (gap-ratio) by the events a driver would send."""
    policy = StagedGapRatio()
    sched = Scheduler(Topology(s["num_gpus"] // s["gpus_per_node"], s["gpus_per_node"]), policy)

    def send(event: Any) -> None:
        for decision in sched.handle(event):
            if isinstance(decision, Grant | Expand):
                sched.handle(DecisionApplied(0.0, decision.decision_id))

    for p in s["pipelines"]:
        clusters = {"actor_infer": ClusterSpec(p["tp"], tuple(p["rollout"])),
                    "actor_train": ClusterSpec(1, tuple(p["train"]))}
        send(PipelineRegistered(0.0, PipelineSpec(p["id"], PipelineKind.FULL_FINETUNE, clusters)))
        send(PipelineAdmitted(0.0, p["id"]))
    for p in s["pipelines"]:
        if p["holds_train"]:
            send(ClusterRequested(0.0, p["id"], "actor_train", 1))
    for p in s["pipelines"]:
        if p["state"] in ("reported", "silent", "releasing"):  # a request RLix has answered, and its ranks
            policy.script = {p["id"]: p["active"]}
            send(ClusterRequested(0.0, p["id"], "actor_infer", 6, estimate=p["total"]))
            sched.pipelines[p["id"]].rollout_request_pending = False
        if p["state"] == "reported":
            send(RolloutProgressed(0.0, p["id"], p["remaining"]))
        elif p["state"] == "pending":
            send(ClusterRequested(0.0, p["id"], "actor_infer", 6, estimate=p["estimate"]))
    policy.script = None
    policy.quiet = True
    for p in s["pipelines"]:
        if p["state"] == "releasing":  # the cycle's round takes its ranks back, then plans
            send(ClusterReleased(0.0, p["id"], "actor_infer"))
    for r in s.get("requests", []):
        send(ClusterRequested(0.0, r["pipeline"], "actor_train", r["priority"]))
    policy.quiet = False
    return sched


def rlix_model(s: dict[str, Any]) -> dict[str, Any]:
    """The situation staged, then one gap-ratio cycle: each pipeline's active ranks after it,
    and the training clusters it granted."""
    sched = staged(s)
    sched.handle(Tick(1.0))  # wakes the next cycle (nothing is in flight)
    return {"active": {p["id"]: sorted(sched.pipelines[p["id"]].active) for p in s["pipelines"]},
            "granted": sorted(p["id"] for p in s["pipelines"]
                              if not p["holds_train"] and "actor_train" in sched.pipelines[p["id"]].holdings)}


def rlix_cycle(checkout: Path, situations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    side = Path(__file__).with_name("rlix_cycle_side.py")
    lines = "".join(json.dumps(s) + "\n" for s in situations)
    done = subprocess.run([sys.executable, str(side), str(checkout)], input=lines, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"rlix_differential: RLix's scheduler did not run: {done.stderr.strip().splitlines()[-1:]}")
    return [json.loads(line) for line in done.stdout.splitlines()]


def compare(checkout: Path, situations: list[dict[str, Any]], seed: int) -> dict[str, Any]:
    num_situations = len(situations)
    theirs = rlix_cycle(checkout, situations)
    differ = []
    moved = 0  # situations where the cycle changed anything (the ones that test it)
    asked = 0  # situations with training requests waiting
    for index, (s, answer) in enumerate(zip(situations, theirs, strict=True)):
        ours = rlix_model(s)
        moved += any(ours["active"][p["id"]] != sorted(p["active"]) for p in s["pipelines"])
        asked += bool(s["requests"])
        reference = answer.get("active")
        if reference is None or ({pid: reference.get(pid, []) for pid in ours["active"]}, answer.get("granted")) != (
                ours["active"], ours["granted"]):
            differ.append({"index": index, "situation": s, "rlix": answer, "gap_ratio": ours})
    cpu_s = sorted(answer.get("cpu_s", 0.0) for answer in theirs)
    return {"situations": num_situations, "seed": seed, "same": num_situations - len(differ),
            "differ": len(differ), "moved": moved, "with_requests": asked,
            "rlix_cycle_cpu_s": {"median": cpu_s[len(cpu_s) // 2], "max": cpu_s[-1]} if cpu_s else None,
            "first_differences": differ[:3]}


def state_situation(sched: Scheduler) -> dict[str, Any]:
    """A situation of the model's state in a run (pipelines renamed p0, p1, ...: RLix's ids allow
    no dots). Every non-rollout cluster a pipeline holds counts as its training gang; a waiting
    request for actor_train is staged, others (a critic's) are not."""
    pipelines: list[dict[str, Any]] = []
    requests: list[dict[str, Any]] = []
    for p in sorted(sched.pipelines.values(), key=lambda p: p.registered_seq):
        if not p.placed:
            continue
        pid = f"p{len(pipelines)}"
        held = sorted(g for hold in p.holdings.values() for g in hold.gpus)
        if not p.rolling:
            state = "idle"
        elif p.rollout_request_pending and not p.remaining:
            state = "pending"
        else:
            state = "reported" if p.remaining else "silent"
        remaining = sum(p.remaining.values())
        pipelines.append({"id": pid, "tp": p.tp, "rollout": list(p.spec.rollout.mapping),
                          "train": held or list(p.spec.clusters["actor_train"].mapping), "holds_train": bool(held),
                          "state": state, "estimate": int(p.estimate), "total": max(p.estimate, remaining),
                          "remaining": remaining, "active": sorted(p.active)})
        if "actor_train" in p.pending and not held:
            requests.append({"pipeline": pid, "priority": int(p.pending["actor_train"].priority)})
    return {"num_gpus": sched.topology.num_gpus, "gpus_per_node": sched.topology.gpus_per_node,
            "pipelines": pipelines, "requests": requests}


def run_states(scenario: str, seed: int, instants_s: list[float]) -> dict[float, dict[str, Any]]:
    """The model's states in a simulated run of `scenario` under gap-ratio, at the first moment
    the run reports (every simulated minute) at or after each instant the run reaches."""
    from rlix.sim.api import new_simulation  # only here: the random situations need no simulator

    sim = new_simulation(scenario, "gap-ratio", seed=seed)
    wanted = sorted(instants_s)
    states: dict[float, dict[str, Any]] = {}

    def capture(now_s: float) -> None:
        while wanted and now_s >= wanted[0]:
            states[wanted.pop(0)] = state_situation(sim.loop.scheduler)

    sim.run(max(instants_s), capture)
    return states


#: --scenario's instants: every 15 minutes of its first three hours.
DEFAULT_AT = [900.0 * i for i in range(1, 13)]


def instants(text: str) -> list[float]:
    """`--at`: simulated seconds (finite, at least 0) separated by commas."""
    return separated_by_commas(text, non_negative_number, "simulated seconds >= 0", "900,1800")


def fail(message: str) -> NoReturn:
    print(f"rlix_differential: {message}", file=sys.stderr)
    sys.exit(2)


def chosen_situations(args: argparse.Namespace, instants_s: list[float]) -> tuple[list[dict[str, Any]], str]:
    """The situations the command line asks for, and how to name them."""
    if not args.scenario:
        rng = random.Random(args.seed)
        return [situation(rng) for _ in range(args.situations)], f"random situations (seed {args.seed})"
    from rlix.scenarios.errors import ScenarioError

    try:
        states = run_states(args.scenario, args.seed, instants_s)
    except ScenarioError as error:
        fail(str(error))
    if not states:
        fail(f"the run of {args.scenario} ended before {min(instants_s):g} s")
    reached = ",".join(f"{t:g}" for t in states)
    return list(states.values()), f"states of {args.scenario} under gap-ratio (seed {args.seed}, at {reached} s)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="rlix_differential.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rlix", type=Path, help="a checkout of RLix (github.com/rlops/rlix)")
    parser.add_argument("--situations", type=positive_int, default=2000, help="random situations drawn (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the situations, or of the --scenario run (default 0)")
    parser.add_argument("--json", action="store_true", help="one JSON line, with the first differences")
    parser.add_argument("--scenario", help="instead of random situations, the states of a simulated run of this "
                        "scenario under gap-ratio (seed --seed), at the instants of --at")
    parser.add_argument("--at", type=instants, default=None,
                        help="with --scenario: simulated seconds, comma-separated (default: "
                        f"{','.join(f'{t:g}' for t in DEFAULT_AT)})")
    args = parser.parse_args(argv)
    if args.at is not None and args.scenario is None:  # it was ignored
        parser.error("--at chooses the instants of --scenario's run: give --scenario")
    instants_s = DEFAULT_AT if args.at is None else args.at
    clone = "git clone https://github.com/rlops/rlix PATH makes one; see --help"
    if args.rlix is None:
        fail(f"needs an RLix checkout to compare with: --rlix PATH ({clone})")
    if not args.rlix.is_dir():
        fail(f"--rlix {args.rlix}: no such folder; give an RLix checkout ({clone})")
    if not (args.rlix / SCHEDULER).is_file():
        fail(f"--rlix {args.rlix} is not an RLix checkout: it has no {SCHEDULER} ({clone})")
    situations, what = chosen_situations(args, instants_s)
    result = compare(args.rlix, situations, args.seed)
    if args.json:
        print(json.dumps(result))
    else:
        cpu = result["rlix_cycle_cpu_s"] or {"median": 0.0, "max": 0.0}
        print(f"gap-ratio makes the same allocations as RLix's scheduling cycle in {result['same']:,} of "
              f"{result['situations']:,} {what}; in {result['moved']:,} of them the model moved ranks, "
              f"{result['with_requests']:,} had training requests waiting; RLix's cycle took "
              f"{cpu['median'] * 1e3:.1f} ms CPU (median), {cpu['max'] * 1e3:.1f} ms at most")
    sys.exit(0 if result["differ"] == 0 else 1)


if __name__ == "__main__":
    main()
