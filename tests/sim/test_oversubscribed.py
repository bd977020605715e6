"""Oversubscribed pools in the simulator: homes given as sizes, placed by the core and recorded.

blog-4on12 (four jobs of 8 GPUs on 12) end to end under every policy: every job finishes, the run
folder replays exactly and passes the run-table checks with the homes as placed (read back from
the `Place` decisions of the event log); without sharing, jobs whose homes overlap never hold
GPUs at the same time and start in arrival order; with sharing all four are placed at once.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rlix.policy import POLICIES
from rlix.runs import check, load, replay
from rlix.sim import simulate


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("oversubscribed")
    folders = {}
    for policy in sorted(POLICIES):
        result = simulate("blog-4on12", policy, out=out / policy, plots=False, check_invariants=True)
        assert result.summary["finished"], policy
        assert result.run_dir is not None
        folders[policy] = result.run_dir
    return folders


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_finishes_replays_and_checks(runs: dict[str, Path], policy: str) -> None:
    folder = runs[policy]
    assert replay(folder).identical
    check(folder)
    run = load(folder)
    steps = run.steps
    assert steps.groupby("pipeline_id").size().to_dict() == {f"job{i}": 10 for i in range(4)}
    for pid, spec in run.specs.items():
        assert spec.placed and len(spec.home) == 8, pid  # as the Place decision left it


def _spans(folder: Path) -> pd.DataFrame:
    allocations = load(folder).allocations
    return allocations.groupby("pipeline_id").agg(first=("t_start", "min"), last=("t_end", "max"))


@pytest.mark.parametrize("policy", ["static", "static-backfill"])
def test_without_sharing_overlapping_homes_take_turns_in_arrival_order(runs: dict[str, Path], policy: str) -> None:
    spans = _spans(runs[policy]).sort_values("first")
    assert list(spans.index) == ["job0", "job1", "job2", "job3"]  # FIFO (all arrive at 0: list order)
    homes = {pid: set(spec.home) for pid, spec in load(runs[policy]).specs.items()}
    for a, b in zip(spans.index, spans.index[1:], strict=False):
        if homes[a] & homes[b]:
            assert spans.loc[b, "first"] >= spans.loc[a, "last"]


def test_sharing_places_every_home_at_once_and_finishes_first(runs: dict[str, Path]) -> None:
    spans = _spans(runs["rlix"])
    assert spans["first"].max() < spans["last"].min()  # all four in the run together
    makespan = {policy: float(load(folder).summary["makespan_s"]) for policy, folder in runs.items()}
    assert makespan["rlix"] < makespan["static"]
    assert makespan["gap-ratio"] < makespan["static"]
