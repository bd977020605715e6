"""What rollout ranks' moves bought (rlix.runs.rank_moves, `rlix-sim jobs`), worked out by hand.

Jobs A, B and C; C runs no rollout rank. A's rank 0 holds GPUs 0-1 over [0, 10] (loads 0-2,
rolls out 2-9, offloads 9-10: 14 GPU-s of rollout for 6 of moves, paid), and A's training takes
both GPUs at 10. A's rank 1 holds GPU 2 over [0, 3] (loads 0-2, rolls out 2-2.5, offloads
2.5-3: 0.5 for 2.5, unpaid), and B's rank 0 takes GPU 2 at 3 and holds it to 20 (loads 3-5,
rolls out 5-20: 15 for 2, paid, nothing after it). A's rank 0 comes back on GPU 0 over [40, 50],
still loaded from a warm start (10 of rollout, no move, paid; nothing takes the GPU after).

By hand: A has 3 tenures (10, 3 and 10 s long, median 10), 24.5 GPU-s of rollout, 8.5 of moves
(8.5 / 33 of its rank time), 1 of 3 unpaid, 1 of 3 cut by training. B: 1 tenure of 17 s, 15 and
2, 2 / 17, none unpaid or cut. C: none. Over all three jobs: 4 / 3 tenures and 39.5 / 3 and
10.5 / 3 GPU-s per job, median 10 s, 10.5 / 50 of rank time moving, 1 of 4 unpaid and 1 of 4
cut by training.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from rlix.runs.folder import write_run
from rlix.runs.rank_moves import RANK_MOVES_COLUMNS, rank_moves, tenures
from rlix.sim.cli import main
from tests.runs.test_jobs import ALONE, two_jobs


def allocations() -> pd.DataFrame:
    rows = [
        ("A", "actor_infer", 6, 0, 0, 0.0, 10.0),
        ("A", "actor_infer", 6, 0, 1, 0.0, 10.0),
        ("A", "actor_train", 1, -1, 0, 10.0, 30.0),
        ("A", "actor_train", 1, -1, 1, 10.0, 30.0),
        ("A", "actor_infer", 6, 1, 2, 0.0, 3.0),
        ("B", "actor_infer", 6, 0, 2, 3.0, 20.0),
        ("A", "actor_infer", 6, 0, 0, 40.0, 50.0),
    ]
    return pd.DataFrame(rows, columns=["pipeline_id", "cluster", "priority", "dp_rank", "gpu", "t_start", "t_end"])


def activity() -> pd.DataFrame:
    rows = [("A", "actor_infer", 0, gpu, kind, stage, t0, t1) for gpu in (0, 1) for kind, stage, t0, t1 in
            (("loading", "load", 0.0, 2.0), ("busy", "rollout", 2.0, 9.0), ("loading", "offload", 9.0, 10.0))]
    rows += [
        ("A", "actor_train", -1, 0, "busy", "actor_train", 10.0, 30.0),  # training: not a rank's
        ("A", "actor_infer", 1, 2, "loading", "load", 0.0, 2.0),
        ("A", "actor_infer", 1, 2, "busy", "rollout", 2.0, 2.5),
        ("A", "actor_infer", 1, 2, "loading", "offload", 2.5, 3.0),
        ("B", "actor_infer", 0, 2, "loading", "load", 3.0, 5.0),
        ("B", "actor_infer", 0, 2, "busy", "rollout", 5.0, 20.0),
        ("A", "actor_infer", 0, 0, "busy", "rollout", 40.0, 50.0),
    ]
    return pd.DataFrame(rows, columns=["pipeline_id", "cluster", "dp_rank", "gpu", "kind", "stage", "t_start", "t_end"])


def jobs() -> pd.DataFrame:
    return pd.DataFrame({"pipeline_id": ["A", "B", "C"], "arrival_s": [0.0, 1.0, 2.0]})


def test_each_tenure_by_hand() -> None:
    table = tenures(allocations(), activity()).sort_values(["pipeline_id", "dp_rank", "t_start"])
    assert table[["pipeline_id", "dp_rank", "t_start", "t_end", "taken", "rollout_gpu_s", "moves_gpu_s"]].values.tolist() \
        == [["A", 0, 0.0, 10.0, 2, 14.0, 6.0], ["A", 0, 40.0, 50.0, 0, 10.0, 0.0],
            ["A", 1, 0.0, 3.0, 1, 0.5, 2.5], ["B", 0, 3.0, 20.0, 0, 15.0, 2.0]]


def test_groups_by_hand() -> None:
    table = rank_moves(jobs(), allocations(), activity()).set_index("group")
    assert list(table.reset_index().columns) == list(RANK_MOVES_COLUMNS)
    expected = {
        "A": (3, 10, 24.5, 8.5, 8.5 / 33, 1 / 3, 1 / 3),
        "B": (1, 17, 15, 2, 2 / 17, 0, 0),
        "all": (4 / 3, 10, 39.5 / 3, 10.5 / 3, 10.5 / 50, 1 / 4, 1 / 4),
    }
    for group, row in expected.items():
        assert table.loc[group].tolist() == pytest.approx(list(row)), group
    c = table.loc["C"]
    assert (c.rank_tenures, c.rollout_gpu_s, c.moves_gpu_s) == (0, 0, 0)
    assert all(math.isnan(c[name]) for name in ("median_tenure_s", "move_share", "unpaid_share", "cut_by_training"))


def test_a_rank_that_has_not_moved_yet_paid() -> None:
    """Rollout equal to moves is paid: a tenure is unpaid only when it ran less than its moves took."""
    acts = activity()
    acts.loc[(acts.pipeline_id == "A") & (acts.dp_rank == 1) & (acts.stage == "rollout"), "t_end"] = 4.5
    acts.loc[(acts.pipeline_id == "A") & (acts.dp_rank == 1) & (acts.stage == "offload"), ["t_start", "t_end"]] = [4.5, 5.0]
    allocs = allocations()
    allocs.loc[(allocs.pipeline_id == "A") & (allocs.dp_rank == 1), "t_end"] = 5.0  # 2.5 of rollout, 2.5 of moves
    allocs.loc[allocs.pipeline_id == "B", "t_start"] = 5.0
    table = rank_moves(jobs(), allocs, acts).set_index("group")
    assert table.loc["A", "unpaid_share"] == 0


def test_the_command_prints_the_moves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_run(two_jobs(), tmp_path / "run", scenario_yaml="name: x\n", plots=False, alone_s=ALONE)
    assert main(["jobs", str(folder)]) == 0
    out = capsys.readouterr().out
    moves = out[out.index("rollout ranks' moves"):].splitlines()
    assert next(line for line in moves if line.startswith("all ")).split()[1:3] == ["0.0", "-"]  # no rank ran
    (folder / "allocations.parquet").unlink()  # as a run with --tables leaves it
    assert main(["jobs", str(folder)]) == 0
    assert "rollout ranks' moves unknown" in capsys.readouterr().out


@pytest.mark.parametrize(("gap_s", "taken"), [(0.0, 2), (0.05, 2), (0.5, 0)])
def test_taken_at_once_allows_a_live_drivers_latency(gap_s: float, taken: int) -> None:
    allocs = allocations()
    allocs.loc[allocs.cluster == "actor_train", "t_start"] = 10.0 + gap_s
    table = tenures(allocs, activity()).set_index(["pipeline_id", "dp_rank", "t_start"])
    assert table.loc[("A", 0, 0.0), "taken"] == taken
