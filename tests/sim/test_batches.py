"""BatchSampler: each prompt's samples come from one trace group, without replacement from a
group large enough, and every group and member is drawn about equally often (counted here by
brute force over many steps, not with the sampler's own arithmetic)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

from rlix.sim.batches import BatchSampler, _order_within_segments

# Groups of 1 to 9 rows (sizes below and above 4 samples per prompt); a row's response length
# is its own id, so a sample says which row it came from.
SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 9]


def grouped_trace() -> pd.DataFrame:
    groups = np.repeat(np.arange(len(SIZES)), SIZES)
    shuffled = np.random.default_rng(5).permutation(len(groups))  # rows of a group not adjacent
    return pd.DataFrame({
        "step": 0,
        "group": groups[shuffled],
        "response_tokens": np.arange(1, len(groups) + 1),
        "prompt_tokens": 7,
    })


def test_each_prompt_draws_from_one_group_without_repeats_when_it_can() -> None:
    trace = grouped_trace()
    group_of = dict(zip(trace.response_tokens, trace.group, strict=True))
    sampler = BatchSampler(trace, seed=1)
    for step in range(50):
        batch = sampler.sample("p", "base", step, num_prompts=6, samples_per_prompt=4)
        assert (batch.prompt_tokens == 7).all()
        for prompt in batch.response_tokens.reshape(6, 4):
            groups = {group_of[int(r)] for r in prompt}
            assert len(groups) == 1
            if SIZES[groups.pop()] >= 4:
                assert len(set(prompt.tolist())) == 4


def test_groups_and_members_are_drawn_uniformly() -> None:
    trace = grouped_trace()
    sampler = BatchSampler(trace, seed=2)
    rows = np.concatenate([
        sampler.sample("p", "base", step, num_prompts=9, samples_per_prompt=4).response_tokens
        for step in range(3000)
    ])
    group_of = dict(zip(trace.response_tokens, trace.group, strict=True))
    prompts = Counter(group_of[int(r)] for r in rows[::4])
    expected = len(rows) / 4 / len(SIZES)
    assert all(abs(n - expected) < 0.1 * expected for n in prompts.values()), prompts
    members = Counter(int(r) for r in rows)
    for group, size in enumerate(SIZES):
        ids = trace.response_tokens[trace.group == group].tolist()
        per_member = prompts[group] * 4 / size
        for member in ids:
            assert abs(members[member] - per_member) < 0.15 * per_member, (group, member)


def test_same_seed_same_batch_other_step_other_batch() -> None:
    a, b = BatchSampler(grouped_trace(), seed=3), BatchSampler(grouped_trace(), seed=3)
    first = a.sample("p", "base", 1, 5, 4).response_tokens
    assert (first == b.sample("p", "base", 1, 5, 4).response_tokens).all()
    assert not (first == a.sample("p", "base", 2, 5, 4).response_tokens).all()


@pytest.mark.parametrize("seed", range(20))
def test_order_within_segments_is_lexsort(seed: int) -> None:
    """The one-key sort of the group sampler against np.lexsort itself, ties included."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 40, int(rng.integers(1, 1100)))
    segment = np.repeat(np.arange(len(sizes)), sizes)
    keys = rng.random(len(segment))
    keys[rng.integers(0, len(keys), len(keys) // 10)] = keys[0]  # equal keys: stable order
    keys[: min(3, len(keys))] = [0.0, 1.0 - 2.0**-53, 0.5][: min(3, len(keys))]
    assert _order_within_segments(segment, keys).tolist() == np.lexsort((keys, segment)).tolist()
