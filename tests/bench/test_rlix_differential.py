"""bench/rlix_differential.py: the situations it draws are what the model is given, the model's
side reproduces hand-checked decisions of RLix's cycle (futile preemption included), and
without a checkout it says so in one line.
With RLIX_CHECKOUT set to a checkout of RLix, a short comparison runs too."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rlix.policy.state import RankStatus
from tests.bench.bench_module import BENCH, load


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCH / "rlix_differential.py"), *args], capture_output=True,
                          text=True, check=False)


def test_without_a_checkout_it_says_so_in_one_line_and_exits_2(tmp_path: Path) -> None:
    for args in ((), ("--rlix", str(tmp_path))):
        done = run(*args)
        assert done.returncode == 2 and done.stdout == ""
        assert len(done.stderr.strip().splitlines()) == 1 and "RLix checkout" in done.stderr
    missing = tmp_path / "nowhere"
    done = run("--rlix", str(missing))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"rlix_differential: --rlix {missing}: no such folder; give an RLix checkout")


def assert_staged_as_given(bench: Any, s: dict[str, Any]) -> None:
    sched = bench.staged(s)
    assert not sched.ledger.inflight
    for p in s["pipelines"]:
        state = sched.pipelines[p["id"]]
        assert sorted(state.active) == sorted(p["active"])  # a releasing one's go in the cycle
        assert all(r.status is RankStatus.ACTIVE for r in state.active.values())
        assert ("actor_train" in state.holdings) == p["holds_train"]
        assert state.rolling == (p["state"] not in ("idle", "releasing"))
        assert state.rollout_request_pending == (p["state"] == "pending")
        assert state.remaining == ({"base": p["remaining"]} if p["state"] == "reported" else {})
        asked = [r["priority"] for r in s["requests"] if r["pipeline"] == p["id"]]
        assert [r.priority for r in state.pending.values()] == asked


def test_a_bad_instant_is_named_before_anything_runs() -> None:
    done = run("--scenario", "lab-day", "--at", "600,soon")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines()[-1] == (
        "rlix_differential.py: error: argument --at: expected a number >= 0, got 'soon'")


def test_the_model_is_given_exactly_the_situation() -> None:
    bench = load("rlix_differential")
    rng = random.Random(5)
    for _ in range(200):
        assert_staged_as_given(bench, bench.situation(rng))


def test_states_of_a_run_are_staged_as_they_were() -> None:
    bench = load("rlix_differential")
    states = bench.run_states("lab-day", 0, [600.0, 1500.0])
    assert list(states) == [600.0, 1500.0]
    for s in states.values():
        assert s["num_gpus"] == 64 and all(p["id"] == f"p{i}" for i, p in enumerate(s["pipelines"]))
        assert_staged_as_given(bench, s)
    assert any(p["state"] != "idle" for s in states.values() for p in s["pipelines"])
    assert list(bench.run_states("tiny", 0, [30.0, 10.0**9])) == [30.0]  # the run ends long before 10^9 s


def pipeline(pid: str, tp: int, state: str, **fields: Any) -> dict[str, Any]:
    base = {"id": pid, "tp": tp, "rollout": [0, 1, 2, 3], "train": [0], "holds_train": False, "state": state,
            "estimate": 100, "total": 100, "remaining": 0, "active": []}
    return {**base, **fields}


@pytest.mark.parametrize(("remaining", "expected"), [
    # D (TP 1) holds all 4 GPUs with 1,200 left; A (TP 2) asks with an estimate of 100: R_A =
    # 200 (the pending boost), targets D 3 and A 2, and each of A's bundles needs two of D's
    # ranks while D may give up only one: nothing moves (tests/policy/test_gap_ratio.py).
    (1200, {"D": [0, 1, 2, 3], "A": []}),
    # With 400 left, D's target is 2 ranks, so it may give up 2: A's rank 0 takes D0 and D1.
    (400, {"D": [2, 3], "A": [0]}),
])
def test_the_model_side_makes_rlix_hand_checked_decisions(remaining: int, expected: dict[str, list[int]]) -> None:
    bench = load("rlix_differential")
    s = {"num_gpus": 4, "gpus_per_node": 4, "pipelines": [
        pipeline("D", 1, "reported", total=remaining, remaining=remaining, active=[0, 1, 2, 3]),
        pipeline("A", 2, "pending", estimate=100),
    ]}
    assert bench.rlix_model(s) == {"active": expected, "granted": []}


@pytest.mark.parametrize(("b_trains", "expected"), [
    # B's gang holds GPU 3, so A's request for GPUs 2-3 cannot be granted; RLix still preempts
    # D's rank on GPU 2 (futile preemption) and the split hands GPU 2 to E, which asked for
    # rollout with twice D's weight (the pending boost): targets D 1, E 2 of a budget of 3.
    (True, {"active": {"D": [0, 1], "A": [], "B": [], "E": [0]}, "granted": []}),
    # Without B's gang, A's request takes D's ranks on GPUs 2-3 and is granted; E's only bundle
    # is A's now, so E gets nothing.
    (False, {"active": {"D": [0, 1], "A": [], "B": [], "E": []}, "granted": ["A"]}),
])
def test_a_waiting_training_request_preempts_as_rlix_does(b_trains: bool, expected: dict[str, Any]) -> None:
    bench = load("rlix_differential")
    s = {"num_gpus": 4, "gpus_per_node": 4, "pipelines": [
        pipeline("D", 1, "reported", total=100, remaining=100, active=[0, 1, 2] if b_trains else [0, 1, 2, 3]),
        pipeline("A", 2, "idle", train=[2, 3]),
        pipeline("B", 1, "idle", train=[3], holds_train=b_trains),
        pipeline("E", 1, "pending", rollout=[2], estimate=100),
    ], "requests": [{"pipeline": "A", "priority": 1}]}
    assert bench.rlix_model(s) == expected


@pytest.mark.skipif(not os.environ.get("RLIX_CHECKOUT"), reason="RLIX_CHECKOUT (a checkout of RLix) not set")
def test_against_rlix_itself() -> None:
    done = run("--rlix", os.environ["RLIX_CHECKOUT"], "--situations", "300")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "in 300 of 300" in done.stdout and "had training requests waiting" in done.stdout
