"""bench/packing.py: the packed makespan of a hand-made activity table, checked by hand, and
on a real run of the bundled tiny scenario its GPU-seconds adding up to the pool's time (and its
rank-less time within the job-seconds there are)."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.bench.bench_module import load


def _rows(*rows: tuple[int, str, str, float, float]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["gpu", "kind", "stage", "t_start", "t_end"])


def test_packed_makespan_by_hand() -> None:
    packing = load("packing").packing
    # 2 GPUs. Init on both 0-10; then GPU 0 trains 10-20, loads 20-22 and rolls out 22-30; GPU 1
    # rolls out 12-18 and sits idle otherwise. The run ends at 35 (5 s after the last work).
    activity = _rows(
        (0, "busy", "init", 0.0, 10.0), (1, "busy", "init", 0.0, 10.0),
        (0, "busy", "actor_train", 10.0, 20.0), (0, "loading", "load", 20.0, 22.0),
        (0, "busy", "rollout", 22.0, 30.0), (1, "busy", "rollout", 12.0, 18.0),
    )
    row = packing(activity, makespan_s=35.0, num_gpus=2)
    assert row["inits_end_s"] == 10.0
    assert row["busy_gpu_s"] == pytest.approx(10 + 8 + 6)
    assert row["loading_gpu_s"] == pytest.approx(2)
    assert row["idle_gpu_s"] == pytest.approx(2 * 20 - 24 - 2)
    # 10 + 24 GPU-s over 2 GPUs + the 5 s after the last work
    assert row["packed_makespan_s"] == pytest.approx(10 + 12 + 5)


def test_interval_across_the_init_end_counts_only_its_part_after() -> None:
    packing = load("packing").packing
    activity = _rows((0, "busy", "init", 0.0, 4.0), (1, "busy", "rollout", 2.0, 8.0))
    row = packing(activity, makespan_s=8.0, num_gpus=2)
    assert row["busy_gpu_s"] == pytest.approx(4.0)
    assert row["idle_gpu_s"] == pytest.approx(4.0)
    assert row["packed_makespan_s"] == pytest.approx(4.0 + 2.0)


def test_tiny_run_adds_up() -> None:
    bench = load("packing")
    row = bench.run_one("tiny", "rlix", 0)
    span_s = row["makespan_s"] - row["inits_end_s"]
    used = row["busy_gpu_s"] + row["loading_gpu_s"] + row["idle_gpu_s"]
    assert row["busy_gpu_s"] > 0 and row["idle_gpu_s"] >= -1e-6
    assert used <= 4 * span_s + 1e-6  # tiny's pool: 4 GPUs; no GPU counted twice
    assert row["inits_end_s"] <= row["packed_makespan_s"] <= row["makespan_s"] + 1e-6
    assert row["ceiling_makespan_s"] is not None and row["ceiling_makespan_s"] > 0
    assert 0 <= row["rankless_in_gangs_s"] <= row["rankless_s"] + 1e-9
    assert row["most_rankless_s"] <= row["rankless_s"] + 1e-9


def test_free_moves_leave_no_loading_time() -> None:
    bench = load("packing")
    priced = bench.run_one("tiny", "rlix", 0)
    free = bench.run_one("tiny", "rlix", 0, free_moves=True)
    assert priced["loading_gpu_s"] > 0  # else the comparison below says nothing
    assert free["loading_gpu_s"] == pytest.approx(0.0, abs=1e-6)
    assert free["steps_per_hour"] > 0


class _Costs:
    """Decode iterations of 1 s + 0.1 s a sequence, and 0.01 s a token of KV cache read."""

    def decode_coefficients(self, batch_size: int, tp: int) -> tuple[float, float]:
        return 1.0 + 0.1 * batch_size, 0.01


def test_one_rank_price_by_hand() -> None:
    import numpy as np

    one_rank_gpu_s = load("packing").one_rank_gpu_s
    step = (np.array([2, 0]), np.array([3, 1]))
    # Together: 2 sequences for 1 iteration (1.2 s), then 1 for 2 (1.1 s each); KV read: the
    # first's prompt of 2 over its 3 tokens plus 0+1+2 of its own, the second none: 9 x 0.01.
    assert one_rank_gpu_s(_Costs(), 2, 2, [step]) == pytest.approx(2 * (1.2 + 2.2 + 0.09))
    # One a rank: the longest alone (3 x 1.1 s), then the other (1.1 s), the same KV read.
    assert one_rank_gpu_s(_Costs(), 2, 1, [step]) == pytest.approx(2 * (3.3 + 1.1 + 0.09))
    assert one_rank_gpu_s(_Costs(), 1, 2, [step, step]) == pytest.approx(2 * (1.2 + 2.2 + 0.09))


def test_tiny_one_rank_packing() -> None:
    row = load("packing").run_one("tiny", "rlix", 0)
    assert 0 < row["one_rank_gpu_s"]
    assert row["rollout_gpu_s"] > 0
    # cheaper or dearer than the run's rollouts, the estimate moves the packed makespan by the
    # difference after the last init at most
    assert abs(row["one_rank_packed_makespan_s"] - row["packed_makespan_s"]) <= row["rollout_gpu_s"] / 4 + 1e-9


def test_rank_count_by_hand() -> None:
    rank_count_s = load("packing").rank_count_s
    # blog-4on12's shape: 12 GPUs, 4 jobs, TP 2, gangs of 8: 4 ranks outside the gangs (one a
    # job, of the 6 the pool holds), 2 during them. 1,000 rank-seconds and 200 s of gangs:
    # (1,000 + 2 x 200) / 4.
    assert rank_count_s(12, 4, 2, 8, 200.0, 1000.0) == pytest.approx(350.0)
    # Two jobs: the gangs leave a rank each, so they cost nothing: 1,000 / 2.
    assert rank_count_s(12, 2, 2, 8, 200.0, 1000.0) == pytest.approx(500.0)
    # Eight jobs on 6 ranks, 2 in gangs: (1,000 + 4 x 200) / 6.
    assert rank_count_s(12, 8, 2, 8, 200.0, 1000.0) == pytest.approx(300.0)


def test_the_rank_count_applies_only_where_gangs_take_turns() -> None:
    """tiny's training clusters are narrower than half its pool, so its gangs need not take
    turns and the count says nothing; blog-4on12's four homes of 8 on 12 GPUs do."""
    bench = load("packing")
    assert bench.run_one("tiny", "rlix", 0)["rank_count_makespan_s"] is None
    row = bench.run_one("blog-4on12", "rlix", 0)
    assert row["inits_end_s"] < row["rank_count_makespan_s"]
    assert row["ceiling_makespan_s"] < row["rank_count_makespan_s"] < row["makespan_s"]
