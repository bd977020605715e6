"""The compiled attempt rows (`AttemptRows.absorb`) against the same rows made with numpy the
plain way: order (re-queued first, each in finishing order), preemption counts before and
after, weight versions per adapter, completed flags and per-adapter counts."""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest

from rlix.sim._engine import ROW_DTYPES, AttemptRows
from rlix.sim.costs import CostModel
from rlix.sim.engine import RolloutGroup

COSTS = CostModel.for_model("7b")
COMPLETED, REQUEUED = 3, 5  # any two codes: the rows carry what they are given


def reference_rows(
    a: dict[str, np.ndarray],
    preempted: np.ndarray,
    completed: np.ndarray,
    codes: np.ndarray,
    times: list[np.ndarray | None],
) -> tuple[dict[str, np.ndarray], list[int]]:
    """The rows of one drain, by sorting and fancy indexing (what the simulator did before)."""
    order = np.argsort(a["completed"], kind="stable")
    done_mask = a["completed"][order]
    ids = a["traj_id"][order]
    before = preempted[ids]
    np.add.at(preempted, ids[~done_mask], 1)
    t_start = a["t_start"][order]
    version = np.zeros(len(ids), dtype=np.int32)
    for code, published in enumerate(times):
        mask = codes[ids] == code
        if published is not None:
            version[mask] = np.searchsorted(published, t_start[mask], side="right")
    completed[ids[done_mask]] = True
    per_adapter = np.bincount(codes[ids[done_mask]], minlength=len(times)).tolist()
    rows = {
        "trajectory_id": ids,
        "dp_rank": a["dp_rank"][order],
        "t_start": t_start,
        "t_end": a["t_end"][order],
        "recomputed_tokens": a["recomputed_tokens"][order],
        "preemptions": np.where(done_mask, preempted[ids], before),
        "weight_version": version,
        "status": np.where(done_mask, COMPLETED, REQUEUED),
    }
    return rows, per_adapter


@pytest.mark.parametrize("seed", range(12))
def test_absorb_matches_the_numpy_rows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 400
    num_adapters = int(rng.integers(1, 4))
    codes = rng.integers(0, num_adapters, n).astype(np.int16)
    times: list[np.ndarray | None] = [
        None if rng.random() < 0.3 else np.sort(rng.uniform(0, 300, int(rng.integers(0, 6))))
        for _ in range(num_adapters)
    ]
    group = RolloutGroup(COSTS, 1, 16, 3000)
    for rank in range(4):
        group.add_engine(rank, 0.0)
    group.submit(np.arange(n), rng.integers(1, 50, n), rng.integers(1, 400, n), np.zeros(n, int))
    # Twins: one drained into AttemptRows, the other's attempts into the numpy reference.
    twins = [group, group.copy()]
    rows = AttemptRows()
    preempted = np.zeros(n, np.int32)
    completed = np.zeros(n, bool)
    ref_preempted = preempted.copy()
    ref_completed = completed.copy()
    expected: dict[str, list[np.ndarray]] = {name: [] for name in ROW_DTYPES}
    total = [0] * num_adapters
    t, next_rank, num_requeued = 0.0, 4, 0
    while True:
        t += float(rng.exponential(4.0))
        for group in twins:
            while group.advance(t)[1] not in ("limit", "idle"):
                pass
        if rng.random() < 0.6 and twins[0].engines:  # churn: re-queued attempts
            rank = twins[0].engines[int(rng.integers(len(twins[0].engines)))]
            for group in twins:
                group.remove_engine(rank, t)
            for group in twins:
                group.add_engine(next_rank, t)
            next_rank += 1
        a = twins[1].drain_attempt_columns()
        got = rows.absorb(
            twins[0], preempted, completed.view(np.uint8), codes, times, COMPLETED, REQUEUED
        )
        if a is None:
            assert got == [0] * num_adapters
        else:
            num_requeued += int((~a["completed"]).sum())
            ref, per_adapter = reference_rows(a, ref_preempted, ref_completed, codes, times)
            assert got == per_adapter
            for name in ROW_DTYPES:
                expected[name].append(ref[name])
            total = [x + y for x, y in zip(total, got, strict=True)]
        if twins[0].num_remaining == 0 or t > 10_000:
            break
    assert sum(total) == n and num_requeued > 10  # every trajectory, and churn happened
    columns = rows.take_columns()
    del rows  # the arrays own their memory: they outlive the AttemptRows they came from
    gc.collect()
    for name, dtype in ROW_DTYPES.items():
        assert columns[name].dtype == dtype
        assert columns[name].tolist() == np.concatenate(expected[name]).astype(dtype).tolist(), name
    assert preempted.tolist() == ref_preempted.tolist() and completed.all() and ref_completed.all()
    assert not math.isnan(columns["t_start"].sum())


def test_append_and_take_columns() -> None:
    """Rows appended as arrays get their weight versions by the same rule as absorbed ones."""
    rows = AttemptRows()
    n = 3000  # past the first capacity: the columns grow
    rng = np.random.default_rng(5)
    codes = rng.integers(0, 2, n).astype(np.int16)
    times: list[np.ndarray | None] = [np.array([10.0, 20.0, 20.0, 35.5]), None]
    values = {
        name: (np.arange(n) * (i + 1)).astype(dtype)
        for i, (name, dtype) in enumerate(ROW_DTYPES.items())
        if name != "weight_version"
    }
    values["trajectory_id"] = rng.permutation(n).astype(np.int32)
    values["t_start"] = rng.uniform(0, 40, n).round(1)
    values["t_start"][:4] = [10.0, 20.0, 9.9, 35.5]  # on and just below a publish time
    rows.append(codes, times, **{name: v[:1000] for name, v in values.items()})
    rows.append(codes, times, **{name: v[1000:] for name, v in values.items()})
    assert rows.size == n
    columns = rows.take_columns()
    assert rows.size == 0 and rows.take_columns()["status"].shape == (0,)
    for name, v in values.items():
        assert columns[name].dtype == v.dtype and columns[name].tolist() == v.tolist()
    expected = np.where(
        codes[values["trajectory_id"]] == 0,
        np.searchsorted(times[0], values["t_start"], side="right"),  # type: ignore[arg-type]
        0,
    )
    assert columns["weight_version"].tolist() == expected.tolist()
    assert columns["weight_version"][:4].tolist() == [
        1 if codes[values["trajectory_id"][0]] == 0 else 0,
        3 if codes[values["trajectory_id"][1]] == 0 else 0,
        0,
        4 if codes[values["trajectory_id"][3]] == 0 else 0,
    ]
