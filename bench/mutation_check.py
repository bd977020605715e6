"""Mutation spot-check: do the tests notice when a checker, the split or a deciding module is broken?

A hand list of mutants (one textual change each) over the invariant checker
(`rlix/policy/invariants.py`, with invariants 5 and 6 in `invariants_reservations.py` and
`invariants_split.py`), the run-table checker (`rlix/policy/run_checks.py`), the
proportional split (`rlix/policy/split.py`) and the modules that decide (`admission.py`,
`ledger.py`, `donors.py`, `drain.py`, `look_ahead.py`, `rollout.py` in `rlix/policy`). The
repository is copied once to a temporary folder; each mutant is written into that copy, the
tests are run there (`python -m pytest -x -q -p no:cacheprovider tests/policy tests/runs`,
importing the copy, no bytecode cached), and the file is put back. A mutant is killed when a test fails and that test
passes again without the mutant (else it is "flaky": the test failed for another reason, e.g. a
timing under load), survived when all pass. The unmutated copy runs first: if it fails, nothing
is measured.

    python bench/mutation_check.py                    # every mutant, a progress bar, a table
    python bench/mutation_check.py --json             # one JSON line: kill rate and each mutant
    python bench/mutation_check.py --only pacing      # mutants whose name contains "pacing"
    python bench/mutation_check.py --ref HEAD         # the committed tree, not the working one
    python bench/mutation_check.py --list             # the mutants, without running anything

A survivor names a test to write. The whole list (87 mutants then, before the rollout.py one)
took 23 minutes on two loaded cores with every mutant killed (the unmutated tests 132 s; a
killed mutant stops at its first failing test, in a few seconds to a minute or two; a survivor
runs them all).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from rlix.traces.options import positive_int, positive_number

REPO = Path(__file__).resolve().parent.parent
TESTS = ("tests/policy", "tests/runs")
INV = "rlix/policy/invariants.py"
#: Invariant 5 (reservations, no overtaking) and invariant 6 (the split), beside the checker.
RES = "rlix/policy/invariants_reservations.py"
INV_SPLIT = "rlix/policy/invariants_split.py"
RUN = "rlix/policy/run_checks.py"
SPLIT = "rlix/policy/split.py"
ADMIT = "rlix/policy/admission.py"
LEDGER = "rlix/policy/ledger.py"
DONORS = "rlix/policy/donors.py"
DRAIN = "rlix/policy/drain.py"
LOOK = "rlix/policy/look_ahead.py"
ROLLOUT = "rlix/policy/rollout.py"
PLACE = "rlix/policy/placement.py"
#: Not copied: version control, environments, caches, run output.
SKIP = (".git", ".venv", "__pycache__", ".hypothesis", ".mypy_cache", ".ruff_cache", ".pytest_cache",
        "*.egg-info", "build", "dist")
#: Left out of the copy at the top level only: run folders written there (`rlix/runs` and
#: `tests/runs` are code).
SKIP_TOP = ("runs",)


def _ignore(folder: str, names: list[str]) -> set[str]:
    skipped = set(shutil.ignore_patterns(*SKIP)(folder, names))
    if Path(folder) == REPO:
        skipped.update(n for n in names if n in SKIP_TOP)
    return skipped


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    old: str  # must occur exactly once in the file
    new: str


def off(name: str, path: str, header: str, indent: int = 4) -> Mutant:
    """The function whose definition ends with `header` returns at once (its checks are off)."""
    return Mutant(name, path, header, f"{header}\n{' ' * indent}return None  # mutant")


def swap(name: str, path: str, old: str, new: str) -> Mutant:
    return Mutant(name, path, old, new)


MUTANTS: tuple[Mutant, ...] = (
    # --- rlix/policy/invariants.py and the modules it composes (invariants_reservations.py:
    # invariant 5; invariants_split.py: invariant 6): each check off, then narrower changes ---
    off("ownership off", INV, "def check_ownership(sched: Scheduler) -> None:"),
    off("holdings-kept off", INV,
        "    def _check_holdings_kept(self, event: ev.Event, decisions: list[Decision]) -> None:", indent=8),
    off("shrink-reasons off", INV, "def check_shrink_reasons(decisions: list[Decision], strict: bool) -> None:"),
    off("shrink-backoff off", INV, "def check_shrink_backoff(sched: Scheduler, decisions: list[Decision]) -> None:"),
    off("no-overtaking off", RES,
        "def check_no_overtaking(sched: Scheduler, decisions: list[Decision], view: ReservationView | None = None) -> None:"),
    off("split off", INV_SPLIT, "def check_split(sched: Scheduler, view: ReservationView | None = None) -> None:"),
    off("rebalance-keeps-targets off", INV_SPLIT,
        "def check_rebalance_keeps_targets(sched: Scheduler, decisions: list[Decision]) -> None:"),
    off("pacing off", INV, "def check_pacing(sched: Scheduler, decisions: list[Decision]) -> None:"),
    swap("pacing off by one", INV, "if d.max_step > bound:", "if d.max_step > bound + 1:"),
    swap("pacing too strict", INV, "if d.max_step > bound:", "if d.max_step >= bound:"),
    swap("no-overtaking: expansions pass", RES, "order = (7, 0)", "continue"),
    swap("no-overtaking: everyone exempt", RES,
         "return pipeline_id in self.waits_on(request) or", "return True or"),
    swap("holdings-kept: removal not checked", INV,
         "        if isinstance(event, ev.PipelineRemoved):\n            for gpu, holder",
         "        if False:\n            for gpu, holder"),
    swap("shrink-reasons: any reason", INV,
         'if d.reason not in ("preempt", "rebalance", "release", "reclaim"):', "if False:"),
    swap("drains: a loan drains", INV, "if any(g not in home for g in d.gpus):", "if False:"),
    swap("drains: for its own grant", INV, "if granted_to.get(d.decision_id) == d.pipeline_id:", "if False:"),
    swap("split: an owner's home only from settled donors", INV_SPLIT,
         "takers = above if own and own.issuperset(rank.gpus) else donors", "takers = donors"),
    swap("split: a recent donor may not take its home back", INV_SPLIT,
         "own = _own_home(sched, p) if held and look_ahead and past_margin else set()",
         "own = _own_home(sched, p) if held and look_ahead and donors is settled else set()"),
    swap("shrink-reasons: rebalance alone passes", INV,
         'if d.reason == "rebalance" and d.decision_id not in required_by_expands:', "if False:"),
    swap("shrink-backoff: deadline inclusive", INV,
         "pipeline.ranks[d.dp_rank].shrink_retry_after_s > sched.now",
         "pipeline.ranks[d.dp_rank].shrink_retry_after_s > sched.now + 1"),
    swap("split: budget unchecked", INV_SPLIT, 'if sum(targets.get(p.pipeline_id, 0) for p in rollers) > budget:',
         "if False:"),
    swap("split: bundle floor unchecked", INV_SPLIT, "if targets.get(p.pipeline_id, 0) < p.tp:", "if False:"),
    swap("split: nothing takeable", INV_SPLIT, "if _takeable(sched, view, rank, p.pipeline_id, takers):", "if False:"),
    swap("rebalance-keeps-targets: below target passes", INV_SPLIT,
         "if held < min(target, held + moved[pipeline_id]):", "if held < min(target, held + moved[pipeline_id]) - 1:"),
    swap("ownership: lost GPU may be held", INV,
         "if expected_holder is not None and gpu in cluster.offline:", "if False:"),
    swap("ownership: free count unchecked", INV, "if num_free != cluster.num_free:", "if False:"),
    swap("ownership: gang shape unchecked", INV, "if hold.gpus != spec.clusters[name].mapping:", "if False:"),
    # --- rlix/policy/run_checks.py ----------------------------------------------------------
    off("allocations off", RUN, "def check_allocations(rows: Iterable[Row], specs: Mapping[str, PipelineSpec],\n"
        "                      spec_at: Callable[[str, float], PipelineSpec | None] | None = None) -> None:"),
    off("rollouts off", RUN, "*, grouped_by_trajectory: bool = False\n) -> None:"),
    off("trajectory off", RUN, "def _check_trajectory(key: Key, attempts: list[Row]) -> None:"),
    swap("allocations: overlap passes", RUN, "if s1 < e0 - TIME_EPS_S:", "if False:"),
    swap("allocations: backwards interval passes", RUN, "if t_end < t_start - TIME_EPS_S:", "if False:"),
    swap("allocations: shape unchecked", RUN, "if gpus != expected:", "if False:"),
    swap("allocations: unknown cluster passes", RUN,
         "if spec is None or cluster not in spec.clusters:\n            raise InvariantViolation(2,",
         "if spec is None:\n            continue\n        if False:\n            raise InvariantViolation(2,"),
    swap("staleness off by one", RUN, 'bound = int(row["step_consumed"]) - spec.staleness_of(adapter)',
         'bound = int(row["step_consumed"]) - spec.staleness_of(adapter) - 1'),
    swap("staleness too strict", RUN, 'if int(row["weight_version"]) < bound:', 'if int(row["weight_version"]) <= bound:'),
    swap("status unchecked", RUN, 'if status not in ("completed", "requeued", "aborted", "in_flight"):', "if False:"),
    swap("completed twice passes", RUN, "if len(finished) > 1:", "if False:"),
    swap("requeued last passes", RUN, 'if attempts[-1]["status"] == "requeued":', "if False:"),
    swap("check_run skips rollouts", RUN, "    check_rollouts(rollouts, specs)\n", "    pass\n"),
    # --- rlix/policy/split.py ---------------------------------------------------------------
    swap("split: smallest remainder first", SPLIT, "-(x / tp - bundles)", "(x / tp - bundles)"),
    swap("split: no sticky rounding", SPLIT, "sticky = claim.num_active_gpus > gpus", "sticky = False"),
    swap("split: leftover past the budget", SPLIT, "        if claim.tp <= left:\n            targets[pipeline_id]",
         "        if True:\n            targets[pipeline_id]"),
    swap("split: shares ignore tp", SPLIT, "share = (c.demand / max_demand) * c.tp * (c.weight / max_weight)",
         "share = (c.demand / max_demand) * (c.weight / max_weight)"),
    swap("split: shares ignore weight", SPLIT, "share = (c.demand / max_demand) * c.tp * (c.weight / max_weight)",
         "share = (c.demand / max_demand) * c.tp"),
    swap("split: smallest share gets the scarce bundle", SPLIT, "key=lambda c: (-shares[c.pipeline_id], c.order",
         "key=lambda c: (shares[c.pipeline_id], c.order"),
    swap("split: home floors even when they do not fit", SPLIT, "    if sum(floors) <= budget:\n        lows = floors",
         "    if True:\n        lows = floors"),
    swap("split: round up", SPLIT, "bundles = math.floor(x / tp + 1e-9)", "bundles = math.ceil(x / tp - 1e-9)"),
    swap("split: zero demand gets a bundle", SPLIT, "if c.demand > 0 and c.max_ranks > 0]", "if c.max_ranks > 0]"),
    swap("split: ideals past all ranks", SPLIT, "        if hi < value:\n            value = hi", "        pass"),
    # --- rlix/policy/admission.py: serving requests, reservations ---------------------------
    swap("admission: a reservation blocks what its request waits on", ADMIT,
         "            and pipeline_id not in self.exempt[request.seq]\n", ""),
    swap("admission: no exemption everywhere", ADMIT,
         "        if not self.reserved_for:\n            self.exempt_everywhere = exempt",
         "        if False:\n            self.exempt_everywhere = exempt"),
    swap("admission: back-off inclusive", ADMIT, "backing_off = request.retry_after_s > sched.now",
         "backing_off = request.retry_after_s >= sched.now"),
    swap("admission: shrink back-off inclusive", ADMIT, "elif holder.shrink_retry_after_s > sched.now:",
         "elif holder.shrink_retry_after_s >= sched.now:"),
    swap("admission: a request waiting for a lost GPU reserves", ADMIT,
         "if policy.reserve_blocked and not verdict.lost:", "if policy.reserve_blocked:"),
    swap("admission: futile preemption while backing off", ADMIT,
         "if policy.futile_preemption and not backing_off:", "if policy.futile_preemption:"),
    swap("admission: waits-on not transitive", ADMIT,
         "                to_scan.extend(pipeline.spec.clusters[r.cluster].mapping for r in pipeline.pending.values())",
         "                pass"),
    swap("admission: a younger reservation takes the GPU", ADMIT,
         "self.reserved_for.setdefault(gpu, request)", "self.reserved_for[gpu] = request"),
    # --- rlix/policy/ledger.py: two-phase decisions -----------------------------------------
    swap("ledger: a taker does not require the releasing shrink", LEDGER,
         "                needed.add(shrink_id)", "                pass"),
    swap("ledger: a failure does not fail its dependents", LEDGER,
         "            self.failed(dependent)", "            pass"),
    swap("ledger: no back-off after a failed expand", LEDGER,
         "holder.retry_after_s = backoff_until", "holder.retry_after_s = sched.now"),
    swap("ledger: no back-off after a failed shrink", LEDGER,
         "holder.shrink_retry_after_s = backoff_until", "holder.shrink_retry_after_s = sched.now"),
    swap("ledger: release on apply ignored", LEDGER,
         "            if holder.release_when_applied:", "            if False:"),
    swap("ledger: a hold repeated every round", LEDGER,
         "if request.hold_reason != reason:", "if True:"),
    swap("ledger: a failed grant requeued without back-off", LEDGER,
         "sched.requeue(holder.request, retry_after_s=backoff_until)",
         "sched.requeue(holder.request, retry_after_s=sched.now)"),
    # --- rlix/policy/donors.py: which rank gives way ----------------------------------------
    swap("donors: least work first", DONORS, "return (-pipeline.demand, pipeline.admitted_seq)",
         "return (pipeline.demand, pipeline.admitted_seq)"),
    swap("donors: newest first on a tie", DONORS, "return (-pipeline.demand, pipeline.admitted_seq)",
         "return (-pipeline.demand, -pipeline.admitted_seq)"),
    swap("donors: a recent receiver takes from donors", DONORS,
         "found = planner.donor_fit(pipeline, self.donors) if may_receive(sched, pipeline) else None",
         "found = planner.donor_fit(pipeline, self.donors)"),
    swap("donors: home back without look-ahead", DONORS,
         "if found is None and sched.config.look_ahead:", "if found is None:"),
    swap("donors: home back from a pipeline at its target", DONORS,
         "d.pipeline_id in holders and d.num_active_gpus > targets.get(d.pipeline_id, 0)",
         "d.pipeline_id in holders and d.num_active_gpus >= targets.get(d.pipeline_id, 0)"),
    swap("donors: a hand-over leaves the donor listed", DONORS,
         "            if donor in donors and not is_donor(sched, donor):\n                donors.remove(donor)\n            return",
         "            return"),
    # Killed by test_donors::test_a_pipeline_a_relocation_took_ranks_from_takes_none_back_within_the_interval
    # (the only one of the deciding modules' mutants that survived every test before it).
    swap("donors: a relocation stamps no rebalance out", DONORS,
         "            if change < 0:\n                affected.last_rebalanced_out_s", "            if False:\n                affected.last_rebalanced_out_s"),
    # --- rlix/policy/drain.py: the drain bound ----------------------------------------------
    swap("drain: a pipeline drains for its own grant", DRAIN,
         "if not bound or rank.pipeline_id == request.pipeline_id:", "if not bound:"),
    swap("drain: a rank partly on its home drains", DRAIN,
         "not set(rank.gpus).issubset(home)", "set(rank.gpus).isdisjoint(home)"),
    swap("drain: unbounded", DRAIN, "return min(bound, took)", "return took"),
    swap("drain: the newest hold weighs all", DRAIN,
         "took if old is None else 0.5 * (old + took)", "took"),
    swap("drain: init holds measured", DRAIN, "if since != since or hold.priority == Priority.INIT:",
         "if since != since:"),
    # Not "a hold released before its grant was applied is measured" (dropping `since != since`):
    # equivalent, the core refuses such a release (lifecycle._check_release), so it never comes.
    # --- rlix/policy/look_ahead.py: loans ---------------------------------------------------
    swap("look-ahead: reclaim at the return, not before", LOOK,
         "due = back - move_s(borrower.offload_s)", "due = back"),
    swap("look-ahead: reclaim a round late", LOOK, "                if due > now:", "                if due >= now:"),
    swap("look-ahead: a late owner expected for ever", LOOK,
         "return back if sched.now <= back + usual else None", "return back"),
    swap("look-ahead: training expected a period late", LOOK,
         "return due if sched.now <= due + 0.5 * period else None", "return due if sched.now <= due + period else None"),
    swap("look-ahead: a shared home promised", LOOK, "gpus = tuple(g for g in pipeline.spec.home if count[g] == 1)",
         "gpus = tuple(g for g in pipeline.spec.home if count[g] >= 1)"),
    swap("look-ahead: payback ignored", LOOK,
         "horizon = self.sched.now + (1.0 + self.payback) * (", "horizon = self.sched.now + 1.0 * ("),
    swap("look-ahead: reclaim ignores a shrink back-off", LOOK,
         "elif rank.status is RANK_ACTIVE and rank.shrink_retry_after_s <= now:", "elif rank.status is RANK_ACTIVE:"),
    swap("look-ahead: the newest move weighs all", LOOK,
         "pipeline.load_s = took if pipeline.load_s != pipeline.load_s else 0.5 * (pipeline.load_s + took)",
         "pipeline.load_s = took"),
    swap("look-ahead: no wake-ahead lead", LOOK,
         "self.owners.append((back - lead_s(sched, pipeline), bits, gpus, pipeline))",
         "self.owners.append((back, bits, gpus, pipeline))"),
    swap("look-ahead: first absence unknown", LOOK,
         "    if pipeline.last_away_s != pipeline.last_away_s:\n        pipeline.last_away_s = 0.0",
         "    if False:\n        pipeline.last_away_s = 0.0"),
    # --- rlix/policy/rollout.py: the inlined free fit ---------------------------------------
    # After kept_back_fit a first-bundle pipeline's forbidden bits are 0 but a home due for
    # reclaim stays unusable; asking forbidden lends it there (changed agentic-4x32 and
    # lab-day). Killed by test_kept_back_fast_path.
    swap("rollout: the fast path asks forbidden, not unusable", ROLLOUT,
         "if reserved or rank.retry_after_s > now or planner.unusable(pipeline):",
         "if reserved or rank.retry_after_s > now or planner.forbidden(pipeline):"),
    # The homes blocked for every roller are those due by the earliest horizon; from the
    # latest, a roller whose loan would pay is kept off them. Killed by test_kept_back_fast_path.
    swap("look_ahead: homes blocked for all by the latest horizon", LOOK,
         "self.sched.now + min(factor", "self.sched.now + max(factor"),
    # kept_back_fit reads the pipeline's unusable bits after letting its forbidden bits go: a
    # free fit that skipped them (every candidate blocked for all) leaves nothing kept, and a
    # home due for reclaim is lent. Killed by test_kept_back_fast_path.
    # The last split is reused only for the same claims and budget; keyed on the budget
    # alone it goes stale. Killed by test_split_memo.
    swap("rollout: the split reused for the same budget alone", ROLLOUT,
         "if memo is not None and memo[0] == key:", "if memo is not None and memo[0][0] == key[0]:"),
    swap("placement: kept_back_fit reads unusable after letting forbidden go", PLACE,
         "unusable = self.unusable(pipeline)  # before the forbidden bits are let go: from them\n"
         "        self._forbidden[pid] = 0\n"
         "        allowed = forbidden & ~self._reclaiming(pipeline)\n"
         "        self._unusable[pid] = unusable & ~allowed",
         "self._forbidden[pid] = 0\n"
         "        allowed = forbidden & ~self._reclaiming(pipeline)\n"
         "        self._unusable[pid] = self.unusable(pipeline) & ~allowed"),
)


def make_copy(ref: str | None) -> Path:
    """The repository in a temporary folder: the working tree, or `ref` (git archive) with the
    compiled extensions of the working tree (build products, not in git)."""
    tree = Path(tempfile.mkdtemp(prefix="rlix-mutants-")) / "repo"
    if ref is None:
        shutil.copytree(REPO, tree, ignore=_ignore)
    else:
        tree.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", ref],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        for built in REPO.glob("rlix/**/*.so"):
            shutil.copy2(built, tree / built.relative_to(REPO))
    return tree


def environment(tree: Path, examples: int | None) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    if examples is not None:
        env["RLIX_HYPOTHESIS_EXAMPLES"] = str(examples)
    return env


def run_tests(tree: Path, env: dict[str, str], tests: tuple[str, ...], timeout_s: float) -> tuple[str, float, str]:
    """'pass', 'fail', 'timeout' or 'error' (pytest could not run), the seconds taken, and the
    first failing test (pytest's "FAILED <test id>" line), if any."""
    t0 = time.monotonic()
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    try:
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - t0, ""
    outcome = {0: "pass", 1: "fail"}.get(done.returncode, "error")
    failed = next((line.split()[1] for line in done.stdout.splitlines() if line.startswith("FAILED ")), "")
    return outcome, time.monotonic() - t0, failed


def check_imports_copy(tree: Path, env: dict[str, str]) -> None:
    """The tests in the copy must import the copy's rlix, not the installed one."""
    found = subprocess.run([sys.executable, "-c", "import rlix; print(rlix.__file__)"], cwd=tree, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    if not Path(found).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"mutation_check: the copy imports rlix from {found}, not from {tree}")


def original_text(tree: Path, mutant: Mutant) -> str:
    """The file the mutant changes, as it is; its text must occur there exactly once."""
    text = (tree / mutant.path).read_text()
    count = text.count(mutant.old)
    if count != 1:
        raise SystemExit(f"mutation_check: mutant {mutant.name!r}: its text occurs {count} times in "
                         f"{mutant.path} (the code changed: update the mutant)")
    return text


def mutate(tree: Path, mutant: Mutant) -> str:
    """Write the mutant into the copy; return the original text to put back."""
    text = original_text(tree, mutant)
    (tree / mutant.path).write_text(text.replace(mutant.old, mutant.new))
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="mutation_check.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON line instead of a table")
    parser.add_argument("--only", default="", help="run the mutants whose name contains this")
    parser.add_argument("--ref", help="mutate this git revision (e.g. HEAD) instead of the working tree")
    parser.add_argument("--examples", type=positive_int, help="RLIX_HYPOTHESIS_EXAMPLES for the property tests")
    parser.add_argument("--timeout", type=positive_number, default=1800.0, help="seconds per test run (a timeout kills)")
    parser.add_argument("--tests", default=",".join(TESTS), help="comma-separated test paths")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = parser.parse_args(argv)
    mutants = [m for m in MUTANTS if args.only in m.name]
    if not mutants:
        parser.error(f"argument --only: no mutant's name contains {args.only!r} (--list names them all)")
    if args.list:
        for m in mutants:
            print(f"{m.path}: {m.name}")
        sys.exit(0)
    tests = tuple(t for t in args.tests.split(",") if t)
    if not tests:
        parser.error("argument --tests: give at least one test path")
    if args.ref is not None and subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"{args.ref}^{{commit}}"],
            capture_output=True).returncode != 0:
        parser.error(f"argument --ref: {args.ref!r} is no commit of {REPO}")
    tree = make_copy(args.ref)
    try:
        missing = [t for t in tests if not (tree / t.split("::")[0]).exists()]
        if missing:  # else the unmutated run fails and the bench stops with status 1
            parser.error(f"argument --tests: no {', '.join(missing)} in the tree mutated")
        env = environment(tree, args.examples)
        check_imports_copy(tree, env)
        for m in mutants:  # every mutant's text must still be there before an hour is spent
            original_text(tree, m)
        baseline, baseline_s, failed = run_tests(tree, env, tests, args.timeout)
        if baseline != "pass":
            raise SystemExit(f"mutation_check: the unmutated tests {baseline} ({failed or ', '.join(tests)}): "
                             "fix them first")
        results = run_mutants(tree, env, tests, mutants, args.timeout)
    finally:
        shutil.rmtree(tree.parent, ignore_errors=True)
    report(results, baseline_s, args.json)


def run_mutants(tree: Path, env: dict[str, str], tests: tuple[str, ...], mutants: list[Mutant],
                timeout_s: float) -> list[dict[str, object]]:
    results: list[dict[str, object]] = []
    bar = tqdm(mutants, desc="mutants", unit="mutant", file=sys.stderr)
    for mutant in bar:
        bar.set_postfix_str(mutant.name[:40])
        original = mutate(tree, mutant)
        try:
            outcome, seconds, failed = run_tests(tree, env, tests, timeout_s)
        finally:
            (tree / mutant.path).write_text(original)
        verdict = {"fail": "killed", "timeout": "killed", "pass": "survived"}.get(outcome, "error")
        if outcome == "fail" and failed and run_tests(tree, env, (failed,), timeout_s)[0] != "pass":
            # The test fails without the mutant too (a flaky test, e.g. a timing under load;
            # hypothesis replays the failing example from its database): not a kill.
            verdict = "flaky"
        results.append({"mutant": mutant.name, "path": mutant.path, "verdict": verdict,
                        "outcome": outcome, "seconds": round(seconds, 1), "killed_by": failed})
        tqdm.write(f"{verdict:>8}  {mutant.name}  ({seconds:.0f} s) {failed}", file=sys.stderr)
    return results


def report(results: list[dict[str, object]], baseline_s: float, as_json: bool) -> None:
    killed = sum(r["verdict"] == "killed" for r in results)
    rate = killed / len(results)
    survived = [r["mutant"] for r in results if r["verdict"] == "survived"]
    flaky = [r["mutant"] for r in results if r["verdict"] == "flaky"]
    errors = [r["mutant"] for r in results if r["verdict"] == "error"]
    if as_json:
        print(json.dumps({"mutants": len(results), "killed": killed, "kill_rate": rate, "survived": survived,
                          "flaky": flaky, "errors": errors, "baseline_s": round(baseline_s, 1),
                          "results": results}))
        return
    for r in results:
        print(f"{r['verdict']:>8}  {r['path']}: {r['mutant']}  ({r['seconds']} s)  {r['killed_by']}")
    print(f"killed {killed} of {len(results)} ({rate:.0%}); unmutated tests took {baseline_s:.0f} s")
    if survived:
        print("survived (each wants a test): " + "; ".join(map(str, survived)))
    if flaky:
        print("not measured (the failing test fails without the mutant too; run them again): "
              + "; ".join(map(str, flaky)))
    if errors:
        print("not measured (pytest could not run: usage or collection error): " + "; ".join(map(str, errors)))


if __name__ == "__main__":
    main()
