"""rlix.policy.due_bits against the entry-by-entry loop it replaces: for any entries, horizon
and borrower, the same bits (a brute-force OR over every entry)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlix.policy.due_bits import DueBits

# Few distinct times, so ties at the horizon and between entries are common.
times = st.one_of(st.sampled_from([0.0, 1.0, 2.5, 4.0, math.inf, math.nan]), st.floats(-10, 10))
entries = st.lists(st.tuples(times, st.integers(0, 2**40)), max_size=40)


def brute(entries: list[tuple[float, int, str]], horizon: float, borrower: str, inclusive: bool) -> int:
    bits = 0
    for due, home, owner in entries:
        if (due <= horizon if inclusive else due < horizon) and owner != borrower:
            bits |= home
    return bits


@given(entries, st.one_of(times, st.floats(-20, 20)), st.integers(0, 45), st.booleans())
def test_the_bits_due_are_the_loops(raw: list[tuple[float, int]], horizon: float, who: int, inclusive: bool) -> None:
    named = [(due, bits, f"p{i}") for i, (due, bits) in enumerate(raw)]
    index = DueBits(named, inclusive)
    assert index.upto(horizon, f"p{who}") == brute(named, horizon, f"p{who}", inclusive)


def test_worked_by_hand() -> None:
    named = [(3.0, 0b0001, "a"), (1.0, 0b0010, "b"), (2.0, 0b0100, "c"), (2.0, 0b1000, "d")]
    back_by = DueBits(named, inclusive=True)
    assert back_by.upto(0.5, "x") == 0
    assert back_by.upto(2.0, "x") == 0b1110  # both entries at 2.0 count at the horizon
    assert back_by.upto(2.0, "c") == 0b1010  # but not the borrower's own
    assert back_by.upto(9.0, "b") == 0b1101
    training_by = DueBits(named, inclusive=False)
    assert training_by.upto(2.0, "x") == 0b0010  # strictly before
    assert training_by.upto(2.0, "b") == 0


def test_an_owner_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        DueBits([(1.0, 1, "a"), (2.0, 2, "a")], inclusive=True)
