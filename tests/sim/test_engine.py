"""The closed-form rollout engines against the token-by-token reference, and their contract:
no trajectory lost, token accounting, stop reasons, copies, busy intervals, input errors."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest

from rlix.sim import _engine
from rlix.sim.costs import CostModel
from rlix.sim.engine import ATTEMPT_FIELDS, RolloutGroup, attempts_to_columns
from rlix.traces import load_bundled
from tests.sim.reference_engine import ReferenceGroup

COSTS = CostModel.for_model("7b")


def drain_all(group: RolloutGroup, t: float) -> str:
    """Advance to t through every stop (batch_done, completions) and return the last reason."""
    while True:
        _, reason = group.advance(t)
        if reason in ("limit", "idle"):
            return reason


def random_scenario(seed: int, scale: int) -> list[tuple]:  # type: ignore[type-arg]
    """A random script of submits, engine additions and removals at random times."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40 * scale))
    capacity = int(rng.integers(150, 600 * scale))
    watermark = float(rng.choice([0.0, 0.01, 0.1]))
    prompt = rng.integers(1, 60, n)
    admit_limit = capacity - int(capacity * watermark)
    response = np.minimum(rng.integers(1, 40 * scale, n), admit_limit - prompt)
    ids = rng.permutation(10 * n)[:n]
    batch = rng.integers(0, 4, n)
    ops: list[tuple] = [
        ("config", int(rng.choice([1, 2])), int(rng.integers(1, 6 * scale)), capacity, watermark)
    ]  # type: ignore[type-arg]
    next_rank = 0
    for _ in range(int(rng.integers(1, 5))):
        ops.append(("add", next_rank, float(rng.uniform(0, 0.05))))
        next_rank += 1
    cuts = sorted(
        rng.choice(np.arange(1, n + 1), size=min(n, int(rng.integers(1, 4))), replace=False)
    )
    start = 0
    t = 0.0
    for cut in [*cuts[:-1], n]:
        ops.append(
            ("submit", ids[start:cut], prompt[start:cut], response[start:cut], batch[start:cut])
        )
        start = cut
        for _ in range(int(rng.integers(0, 4))):
            t += float(rng.exponential(0.25))
            ops.append(("advance", t))
            if rng.random() < 0.5:
                ops.append(("remove", t, float(rng.random())))
            if rng.random() < 0.6:
                ops.append(("add", next_rank, t + float(rng.uniform(0, 0.1))))
                next_rank += 1
    ops.append(("add", next_rank, t))
    ops.append(("advance", math.inf))
    return ops


Router = tuple[bool, bool]


def play(
    ops: list[tuple], group_cls: type, router: Router = (True, True)
) -> tuple[object, list[tuple]]:  # type: ignore[type-arg]
    _, tp, max_batch, capacity, watermark = ops[0]
    group = group_cls(COSTS, tp, max_batch, capacity, watermark, *router)
    live: list[int] = []
    records: list[tuple] = []  # type: ignore[type-arg]
    for op in ops[1:]:
        if op[0] == "add":
            group.add_engine(op[1], op[2])
            live.append(op[1])
        elif op[0] == "submit":
            group.submit(*op[1:])
        elif op[0] == "advance":
            if isinstance(group, RolloutGroup):
                drain_all(group, op[1])
            else:
                group.advance(op[1])
        elif op[0] == "remove" and live:
            rank = live.pop(int(op[2] * len(live)))
            records.append(("removed", rank, group.remove_engine(rank, op[1])))
        elif op[0] == "close" and live:
            group.close_engine(live[int(op[1] * len(live))])
    attempts = group.drain_attempts() if isinstance(group, RolloutGroup) else group.records
    return group, sorted(attempts, key=lambda a: (a[0], a[2], a[6])) + records


#: (balance, migrate_on_expand): the default router, each rule alone, and neither (plain FIFO).
ROUTERS = [(True, True)] * 3 + [(False, False), (True, False), (False, True)]


def assert_same_attempts(fast: list[tuple], slow: list[tuple]) -> None:  # type: ignore[type-arg]
    assert len(fast) == len(slow)
    for a, b in zip(fast, slow, strict=True):
        if a[0] == "removed":
            assert a == b
            continue
        assert (a[0], a[1], a[4], a[5], a[6]) == (b[0], b[1], b[4], b[5], b[6]), (a, b)
        assert a[2] == pytest.approx(b[2], rel=1e-6, abs=1e-9)
        assert a[3] == pytest.approx(b[3], rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("seed", range(120))
def test_matches_token_by_token_reference(seed: int) -> None:
    ops = random_scenario(seed, scale=1 + seed % 4)
    router = ROUTERS[seed % len(ROUTERS)]
    _, fast = play(ops, RolloutGroup, router)
    _, slow = play(ops, ReferenceGroup, router)
    assert_same_attempts(fast, slow)
    assert any(a[6] == "completed" for a in fast)


def with_closes(ops: list[tuple], seed: int) -> list[tuple]:  # type: ignore[type-arg]
    """`ops` with engines closed to admissions (drains) after some of its advances."""
    rng = np.random.default_rng([seed, 0xD1A1])
    out: list[tuple] = []  # type: ignore[type-arg]
    for op in ops:
        out.append(op)
        if op[0] == "advance" and op[1] != math.inf and rng.random() < 0.5:
            out.append(("close", float(rng.random())))
    if not any(op[0] == "close" for op in out):  # at least one, right after the first submit
        first = next(i for i, op in enumerate(out) if op[0] == "submit")
        out.insert(first + 1, ("close", float(rng.random())))
    return out


@pytest.mark.parametrize("seed", range(60))
def test_closed_engines_match_the_reference(seed: int) -> None:
    """A closed (draining) engine admits nothing and takes no share of the queue: the same
    attempts as the token-by-token reference, on every router."""
    ops = with_closes(random_scenario(seed, scale=1 + seed % 4), seed)
    router = ROUTERS[seed % len(ROUTERS)]
    _, fast = play(ops, RolloutGroup, router)
    _, slow = play(ops, ReferenceGroup, router)
    assert_same_attempts(fast, slow)


def test_a_closed_engine_runs_what_it_holds_and_stops_when_empty() -> None:
    """Closed with work queued, an engine takes none of it; `advance` stops ("drained") at the
    event that empties it, and nothing it held went back to the queue."""
    group = RolloutGroup(COSTS, 1, 4, 100_000, 0.0, True, False)
    group.add_engine(0, 0.0)
    group.add_engine(1, 0.0)
    group.submit(np.arange(12), np.full(12, 10), np.array([5, 5, 5, 5, 50, 50, 50, 50, 9, 9, 9, 9]), np.zeros(12, np.int64))
    group.advance(0.0)
    held = {rank: n for rank, n in group.running_by_rank().items()}
    assert held == {0: 4, 1: 4}
    group.close_engine(0)
    reasons = []
    while True:
        t, reason = group.advance(math.inf)
        reasons.append((reason, group.engine(0).b))
        if reason in ("limit", "idle"):
            break
    assert ("drained", 0) in reasons
    attempts = group.drain_attempts()
    on_closed = [a for a in attempts if a[1] == 0]
    assert len(on_closed) == 4 and all(a[6] == "completed" for a in on_closed)  # nothing new, nothing cut
    assert sum(a[6] == "completed" for a in attempts) == 12  # rank 1 ran the other eight
    assert not any(a[6] == "requeued" for a in attempts)


def test_closing_an_engine_it_does_not_have_is_an_error() -> None:
    group = RolloutGroup(COSTS, 1, 4, 1000)
    with pytest.raises(ValueError, match="no engine"):
        group.close_engine(3)


def test_cutting_done_trajectories_changes_nothing() -> None:
    """With the per-trajectory lists cut at every submit that can, the same attempts."""
    cuts: list[int] = []
    old = _engine.set_min_compact(1)
    try:
        for seed in range(30):
            ops = step_by_step_scenario(seed)
            router = ROUTERS[seed % len(ROUTERS)]
            _, slow = play(ops, ReferenceGroup, router)
            group, fast = play(ops, RolloutGroup, router)
            assert_same_attempts(fast, slow)
            cuts.append(group.num_compactions)  # type: ignore[attr-defined]
    finally:
        _engine.set_min_compact(old)
    assert sum(cuts) > 100 and max(cuts) > 3


def step_by_step_scenario(seed: int) -> list[tuple]:  # type: ignore[type-arg]
    """Steps of a pipeline: a batch submitted, advanced for a while (ranks leaving and
    joining), the next batch, ... (many submits, each after most of the last finished)."""
    rng = np.random.default_rng(seed)
    capacity = int(rng.integers(300, 1200))
    ops: list[tuple] = [("config", 1, int(rng.integers(2, 12)), capacity, 0.01)]  # type: ignore[type-arg]
    next_rank, next_id, t = 3, 0, 0.0
    ops += [("add", rank, 0.0) for rank in range(3)]
    for step in range(12):
        n = int(rng.integers(5, 30))
        ids = np.arange(next_id, next_id + n)
        next_id += n
        response = rng.integers(1, 40, n)
        ops.append(("submit", ids, rng.integers(1, 40, n), response, np.full(n, step % 3)))
        for _ in range(3):
            t += float(rng.exponential(0.3))
            ops.append(("advance", t))
            if rng.random() < 0.3:
                ops.append(("remove", t, float(rng.random())))
                ops.append(("add", next_rank, t + 0.01))
                next_rank += 1
    ops.append(("advance", math.inf))
    return ops


def test_reference_scenarios_exercise_preemption() -> None:
    """The random scenarios above do reach KV preemption, removals and resumed prefixes."""
    statuses: dict[str, int] = defaultdict(int)
    for seed in range(40):
        _, fast = play(random_scenario(seed, scale=1 + seed % 4), RolloutGroup)
        for a in fast:
            if a[0] == "removed":
                statuses["removals"] += a[2] > 0
            else:
                statuses[a[6]] += 1
                statuses["resumed"] += a[5] > 0
    assert statuses["requeued"] > 100 and statuses["resumed"] > 100 and statuses["removals"] > 10


def agentic_group(
    seed: int, num: int, max_batch: int = 256
) -> tuple[RolloutGroup, dict[int, tuple[int, int]]]:
    trace = load_bundled("agentic_small")
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(trace), num)
    prompts = trace["prompt_tokens"].to_numpy()[pick]
    responses = trace["response_tokens"].to_numpy()[pick]
    # A capacity of half a 7B rank keeps every engine under KV pressure.
    group = RolloutGroup(COSTS, 1, max_batch, COSTS.kv_capacity_tokens(1) // 2)
    ids = rng.permutation(num * 3)[:num]
    group.submit(ids, prompts, responses, np.arange(num) % 3)
    return group, {
        int(i): (int(p), int(r)) for i, p, r in zip(ids, prompts, responses, strict=True)
    }


@pytest.mark.parametrize("seed", range(3))
def test_preemption_keeps_every_trajectory_and_counts_tokens(seed: int) -> None:
    rng = np.random.default_rng(seed)
    group, lengths = agentic_group(seed, 1500, max_batch=int(rng.integers(16, 200)))
    for rank in range(6):
        group.add_engine(rank, float(rng.uniform(0, 5)))
    next_rank, t = 6, 0.0
    attempts = []
    while True:
        t += float(rng.exponential(40.0))
        reason = drain_all(group, t)
        assert group.num_remaining == group.num_queued + group.num_running
        if reason == "idle":
            break
        for _ in range(int(rng.integers(0, 3))):
            if len(group.engines) > 1:
                group.remove_engine(int(rng.choice(group.engines)), t)
        if rng.random() < 0.7 or not group.engines:
            group.add_engine(next_rank, t + float(rng.uniform(0, 3)))
            next_rank += 1
        attempts += group.drain_attempts()
    attempts += group.drain_attempts()
    by_traj = defaultdict(list)
    for a in attempts:
        by_traj[a[0]].append(a)
    assert set(by_traj) == set(lengths)
    num_requeued = 0
    for traj, tries in by_traj.items():
        tries.sort(key=lambda a: a[2])
        assert [a[6] for a in tries].count("completed") == 1 and tries[-1][6] == "completed"
        num_requeued += len(tries) - 1
        generated_before = 0
        for a in tries:
            assert a[5] == generated_before  # the prefix recomputed is what earlier attempts made
            generated_before += a[4]
            assert a[2] <= a[3]
        assert generated_before == lengths[traj][1]
        for earlier, later in zip(tries, tries[1:], strict=False):
            assert earlier[3] <= later[2]
    assert num_requeued > 10


def test_stop_reasons() -> None:
    pieces, _ = agentic_group(7, 600)
    for rank in range(4):
        pieces.add_engine(rank, 0.0)
    reasons: set[str] = set()
    completed = 0
    while True:
        before = pieces.now
        t, reason = pieces.advance(pieces.now + 30.0, max_completions=7)
        reasons.add(reason)
        done = [a for a in pieces.drain_attempts() if a[6] == "completed"]
        completed += len(done)
        if reason == "completions":
            assert len(done) >= 7 and max(a[3] for a in done) == t
        if reason == "batch_done":
            assert pieces.done_batches() and max(a[3] for a in done) == t
        if reason == "limit":
            assert t == before + 30.0
        if reason == "idle":
            break
    assert reasons == {"completions", "batch_done", "limit", "idle"}
    assert completed == 600
    assert not pieces.done_batches()


def test_advance_in_pieces_equals_advance_at_once() -> None:
    whole, _ = agentic_group(8, 500)
    pieces, _ = agentic_group(8, 500)
    for g in (whole, pieces):
        for rank in range(3):
            g.add_engine(rank, 0.0)
    drain_all(whole, math.inf)
    kept = []
    while True:
        _, reason = pieces.advance(pieces.now + 11.0, max_completions=5)
        kept += pieces.drain_attempts()
        if reason == "idle":
            break
    assert sorted(kept) == sorted(whole.drain_attempts())
    assert sorted(whole.done_batches()) == [0, 1, 2]


def test_copy_is_independent_and_adoptable() -> None:
    group, _ = agentic_group(3, 800)
    for rank in range(4):
        group.add_engine(rank, 0.0)
    drain_all(group, 50.0)
    group.drain_attempts()
    spec = group.copy()
    spec.submit([10**6], [100], [50], [9])
    spec.remove_engine(0, 50.0)
    drain_all(spec, 400.0)
    assert spec.drain_attempts()
    # The original did not see the copy's submit, removal or progress.
    assert group.now == 50.0 and group.engines == [0, 1, 2, 3] and not group.drain_attempts()
    twin = group.copy()
    drain_all(group, math.inf)
    drain_all(twin, math.inf)
    assert sorted(group.drain_attempts()) == sorted(twin.drain_attempts())
    assert sorted(group.drain_busy()) == sorted(twin.drain_busy())


def test_engine_copy_copies_every_field() -> None:
    """A copied group's engines equal the original's in every field, heap and running slot,
    and stay so while the original moves on (nothing shared)."""
    group, _ = agentic_group(3, 800)
    for rank in range(4):
        group.add_engine(rank, 0.0)
    drain_all(group, 30.0)
    group.remove_engine(1, 30.0)  # stale heap keys and a re-queued front too
    drain_all(group, 31.0)
    twin = group.copy()
    before = {rank: group.engine(rank).state() for rank in group.engines}
    assert all(state[4] > 0 and state[14] for state in before.values())
    assert {rank: twin.engine(rank).state() for rank in twin.engines} == before
    drain_all(group, 200.0)
    assert {rank: twin.engine(rank).state() for rank in twin.engines} == before
    assert {rank: group.engine(rank).state() for rank in group.engines} != before


def test_busy_intervals_cover_attempts_and_skip_idle_engines() -> None:
    group, _ = agentic_group(5, 300)
    group.add_engine(0, 1.0)
    group.add_engine(1, 2.0)
    drain_all(group, 100.0)
    group.remove_engine(1, 100.0)
    group.add_engine(2, 120.0)
    drain_all(group, math.inf)
    group.add_engine(3, group.now + 1)  # never gets work: never busy
    drain_all(group, group.now + 100)
    group.remove_engine(3, group.now)
    busy = group.drain_busy(until=group.now)
    attempts = group.drain_attempts()
    by_rank = defaultdict(list)
    for rank, start, end in busy:
        assert start < end
        by_rank[rank].append((start, end))
    assert set(by_rank) == {0, 1, 2}
    for intervals in by_rank.values():
        intervals.sort()
        assert all(a[1] <= b[0] for a, b in zip(intervals, intervals[1:], strict=False))
    assert min(s for s, _ in by_rank[0]) == 1.0 and max(e for _, e in by_rank[1]) == 100.0
    for a in attempts:
        assert any(s <= a[2] and a[3] <= e for s, e in by_rank[a[1]]), a


def test_drain_busy_cuts_open_intervals() -> None:
    group, _ = agentic_group(5, 50)
    group.add_engine(0, 0.0)
    drain_all(group, 10.0)
    assert group.drain_busy() == []
    assert group.drain_busy(until=10.0) == [(0, 0.0, 10.0)]
    drain_all(group, 20.0)
    assert group.drain_busy(until=20.0) == [(0, 10.0, 20.0)]


def test_remove_completes_what_finished_at_that_instant() -> None:
    group = RolloutGroup(COSTS, 1, 4, 10_000)
    group.add_engine(0, 0.0)
    group.submit([1, 2], [10, 10], [5, 50], [0, 0])
    t, reason = group.advance(math.inf, max_completions=1)
    assert reason == "completions"
    assert group.remove_engine(0, t) == 1
    attempts = sorted(group.drain_attempts())
    assert attempts[0][0] == 1 and attempts[0][6] == "completed" and attempts[0][3] == t
    assert attempts[1][:2] == (2, 0) and attempts[1][4:] == (5, 0, "requeued")
    assert group.num_queued == 1 and group.num_running == 0


@pytest.mark.parametrize(("watermark", "admitted"), [(0.0, 3), (0.1, 2)])
def test_admission_keeps_the_watermark_free(watermark: float, admitted: int) -> None:
    # 1000 KV tokens: a third prompt of 300 fits under 1000 (600 + 2 + 300 + 1), not under 900.
    group = RolloutGroup(COSTS, 1, 8, 1000, kv_watermark=watermark)
    group.add_engine(0, 0.0)
    group.submit([1, 2, 3], [300, 300, 300], [10, 10, 10], [0, 0, 0])
    group.advance(0.0)
    assert group.num_running == admitted
    with pytest.raises(ValueError, match="kv_watermark must be in"):
        RolloutGroup(COSTS, 1, 8, 1000, kv_watermark=1.0)


def uniform_batch(group: RolloutGroup, num: int, response_tokens: int = 2000) -> None:
    ids = np.arange(num)
    group.submit(ids, np.full(num, 100), np.full(num, response_tokens), np.zeros(num, int))


@pytest.mark.parametrize(("balance", "split"), [(True, [128] * 4), (False, [256, 256, 0, 0])])
def test_ranks_share_a_step_evenly(balance: bool, split: list[int]) -> None:
    # KV to spare: only the router decides who runs what.
    two = RolloutGroup(COSTS, 1, 256, 10**7, balance=balance)
    two.add_engine(0, 0.0)
    two.add_engine(1, 0.0)
    uniform_batch(two, 512)
    two.advance(0.0)
    assert two.running_by_rank() == {0: 256, 1: 256}
    # Four ranks expanded together, two of them still loading: the loading ones keep their share.
    four = RolloutGroup(COSTS, 1, 256, 10**7, balance=balance)
    for rank, t_ready in enumerate([0.0, 0.0, 5.0, 5.0]):
        four.add_engine(rank, t_ready)
    uniform_batch(four, 512)
    four.advance(1.0)
    assert list(four.running_by_rank().values())[:2] == split[:2]
    assert four.num_queued == sum(split[2:])
    four.advance(5.0)
    assert list(four.running_by_rank().values()) == split


@pytest.mark.parametrize("migrate", [True, False])
def test_a_joining_rank_receives_migrated_sequences(migrate: bool) -> None:
    group = RolloutGroup(COSTS, 1, 256, 10**7, migrate_on_expand=migrate)
    group.add_engine(0, 0.0)
    group.add_engine(1, 0.0)
    uniform_batch(group, 512)
    drain_all(group, 10.0)
    assert not group.drain_attempts()  # 2,000 tokens take longer than 10 s
    group.add_engine(2, 10.0)
    drain_all(group, 11.0)
    moved = group.drain_attempts()
    if not migrate:
        assert group.running_by_rank() == {0: 256, 1: 256, 2: 0} and not moved
        return
    # 512 over 3 ranks: 171 each at most; each busy rank sheds its 85 latest admitted.
    assert group.running_by_rank() == {0: 171, 1: 171, 2: 170}
    assert sorted(a[0] for a in moved) == [*range(171, 256), *range(427, 512)]
    assert {a[6] for a in moved} == {"requeued"} and all(10.0 <= a[3] <= 11.0 for a in moved)
    prefix = {a[0]: a[4] for a in moved}
    assert min(prefix.values()) > 0
    drain_all(group, math.inf)
    resumed = [a for a in group.drain_attempts() if a[1] == 2]
    assert len(resumed) == 170 and all(a[5] == prefix[a[0]] for a in resumed)
    assert all(a[4] + a[5] == 2000 for a in resumed)


def test_attempt_columns() -> None:
    group = RolloutGroup(COSTS, 1, 4, 10_000)
    group.add_engine(0, 0.0)
    group.submit([7], [10], [5], [0])
    drain_all(group, math.inf)
    cols = attempts_to_columns(group.drain_attempts())
    assert list(cols) == list(ATTEMPT_FIELDS)
    assert cols["traj_id"].tolist() == [7] and cols["status"].tolist() == ["completed"]
    assert cols["generated_tokens"].tolist() == [5]
    assert len(attempts_to_columns([])["t_end"]) == 0


def test_attempt_columns_fast_path_matches_the_tuples() -> None:
    tuples_group, _ = agentic_group(4, 300)
    arrays_group, _ = agentic_group(4, 300)
    for g in (tuples_group, arrays_group):
        for rank in range(3):
            g.add_engine(rank, 0.0)
        drain_all(g, 60.0)
        g.remove_engine(1, 60.0)  # requeued attempts too
        drain_all(g, math.inf)
    expected = attempts_to_columns(tuples_group.drain_attempts())
    got = arrays_group.drain_attempt_columns()
    assert got is not None and arrays_group.drain_attempt_columns() is None
    assert got["completed"].tolist() == (expected["status"] == "completed").tolist()
    assert not got["completed"].all()
    for name in ATTEMPT_FIELDS[:-1]:
        assert got[name].dtype == expected[name].dtype
        assert got[name].tolist() == expected[name].tolist(), name


def test_bad_input_is_a_clear_error() -> None:
    group = RolloutGroup(COSTS, 1, 4, 1000)
    with pytest.raises(ValueError, match="response_tokens must be 1-D with 2"):
        group.submit([1, 2], [3, 4], [5], [0, 0])
    with pytest.raises(ValueError, match="prompt_tokens must be integers"):
        group.submit([1], [3.5], [5], [0])
    with pytest.raises(ValueError, match="trajectory 9 has response_tokens=0"):
        group.submit([8, 9], [3, 4], [5, 0], [0, 0])
    with pytest.raises(ValueError, match="trajectory 9 needs 1001 KV tokens"):
        group.submit([8, 9], [3, 1], [5, 1000], [0, 0])
    assert group.num_queued == 0
    with pytest.raises(ValueError, match="max_batch must be a positive integer"):
        RolloutGroup(COSTS, 1, 0, 1000)
    group.add_engine(0, 1.0)
    with pytest.raises(ValueError, match="dp_rank 0 already"):
        group.add_engine(0, 1.0)
    with pytest.raises(ValueError, match="dp_rank 5 has no engine"):
        group.remove_engine(5, 1.0)
    group.submit([1], [3], [500], [0])
    drain_all(group, 2.0)
    with pytest.raises(ValueError, match="advance the group to t=5.0 first"):
        group.remove_engine(0, 5.0)
    with pytest.raises(ValueError, match="before the group's time"):
        group.advance(1.0)
    with pytest.raises(ValueError, match="t_ready 1.0 is before"):
        group.add_engine(1, 1.0)


def test_copy_into_a_spare_is_a_fresh_copy() -> None:
    """A copy made in a spare group's memory (other ranks, other sizes, its own queue) is the
    same as a fresh copy, then and after both are advanced; the source is untouched."""
    group, _ = agentic_group(3, 800)
    for rank in range(4):
        group.add_engine(rank, 0.0)
    drain_all(group, 20.0)
    spare = group.copy()
    spare.remove_engine(2, 20.0)
    spare.add_engine(7, 20.0)
    spare.submit(
        np.arange(10**6, 10**6 + 500), np.full(500, 9), np.full(500, 40), np.zeros(500, int)
    )
    drain_all(spare, 90.0)
    group.remove_engine(1, 20.0)  # a re-queued front
    drain_all(group, 45.0)
    before = {rank: group.engine(rank).state() for rank in group.engines}
    fresh = group.copy()
    reused = group.copy(spare)
    assert reused is spare and reused.engines == fresh.engines == group.engines
    assert {r: reused.engine(r).state() for r in reused.engines} == before
    assert (reused.now, reused.num_queued, reused.num_remaining) == (
        fresh.now,
        fresh.num_queued,
        fresh.num_remaining,
    )
    for g in (fresh, reused):
        g.add_engine(9, 60.0)
        drain_all(g, math.inf)
    assert fresh.drain_attempts() == reused.drain_attempts()
    assert fresh.drain_busy() == reused.drain_busy()
    assert {rank: group.engine(rank).state() for rank in group.engines} == before
    with pytest.raises(ValueError, match="same configuration"):
        group.copy(group)
