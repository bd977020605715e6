"""Rank moves (rlix.runs.rank_moves) on a simulated run, against a brute-force reference.

The module places each activity row in its tenure with an as-of join. Here every row is
placed by scanning the rank's holds on that GPU for the one whose interval contains it, which
must be exactly one, and the per-tenure sums must agree.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from rlix.runs.rank_moves import tenures
from rlix.scenarios import load_scenario
from rlix.sim import simulate


@pytest.mark.parametrize("policy", ["rlix", "gap-ratio"])
def test_every_rank_activity_lies_in_exactly_one_tenure(policy: str) -> None:
    scenario = load_scenario("blog-4on12").with_policy(policy, {})
    tables = simulate(scenario, plots=False, alone=False).tables
    allocations, activity = tables["allocations"], tables["activity"]
    holds = defaultdict(list)
    for row in allocations[allocations["cluster"] == "actor_infer"].itertuples():
        holds[(str(row.pipeline_id), int(row.dp_rank), int(row.gpu))].append((row.t_start, row.t_end))
    expected: dict[tuple[str, int, float], list[float]] = defaultdict(lambda: [0.0, 0.0])
    rows = activity[(activity["cluster"] == "actor_infer") & activity["stage"].isin(("rollout", "load", "offload"))]
    assert len(rows) > 100
    for row in rows.itertuples():
        key = (str(row.pipeline_id), int(row.dp_rank), int(row.gpu))
        inside = [t0 for t0, t1 in holds[key] if t0 <= row.t_start and row.t_end <= t1]
        assert len(inside) == 1, (key, row.t_start, row.t_end)
        expected[(key[0], key[1], inside[0])][row.stage != "rollout"] += row.t_end - row.t_start
    table = tenures(allocations, activity)
    got = {(p, r, t): [roll, moves] for p, r, t, roll, moves in
           table[["pipeline_id", "dp_rank", "t_start", "rollout_gpu_s", "moves_gpu_s"]].itertuples(index=False)}
    assert {k for k, v in got.items() if v != [0.0, 0.0]} == set(expected)
    for key, (rollout_s, moves_s) in expected.items():
        assert got[key] == pytest.approx([rollout_s, moves_s]), key
