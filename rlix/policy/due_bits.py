"""Slot bits of homes due by a horizon, for every borrower of a round at once.

The look-ahead keeps a borrower off the homes whose owners are back, or begin training,
before a loan to it would pay (rlix.policy.look_ahead, rules 1 and 4). Each borrower has its
own horizon (its own measured move times), and on a pool with hundreds of jobs a round asks
for every rolling pipeline's blocked bits: asked entry by entry, that is rollers x homes per
round, the largest cost of a round at 1,024 GPUs with ~250 jobs. Here the entries are sorted
by when they fall due once a round, with the OR of every prefix, so a borrower's answer is a
binary search and at most two ORs: the prefix before its own entry (a pipeline is never kept
off its own home) and a range after it, from a sparse table of range ORs. OR commutes, so the
bits are exactly those of the entry-by-entry loop.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right


class DueBits:
    """(due time, slot bits, owner id) entries, each owner at most once; `upto` gives the OR of
    the bits of the entries due by a horizon, but the borrower's own."""

    def __init__(self, entries: list[tuple[float, int, str]], inclusive: bool) -> None:
        # An entry due at nan is never due (no comparison with nan holds), so it is left out.
        ordered = sorted((e for e in entries if e[0] == e[0]), key=lambda e: e[0])
        self.times = [e[0] for e in ordered]
        self.bits = [e[1] for e in ordered]
        self.position = {e[2]: i for i, e in enumerate(ordered)}
        if len(self.position) != len(ordered):
            raise ValueError("an owner appears twice")
        self.prefix = [0]
        for bits in self.bits:
            self.prefix.append(self.prefix[-1] | bits)
        #: due at the horizon counts (`<=`), or only before it (`<`)
        self.inclusive = inclusive
        self._table: list[list[int]] | None = None

    def upto(self, horizon: float, borrower: str) -> int:
        """The OR of the bits of the entries due by `horizon` (at it too when inclusive),
        the entry of `borrower` left out."""
        if horizon != horizon:  # nothing is due by nan, as no comparison with nan holds
            return 0
        times = self.times
        k = bisect_right(times, horizon) if self.inclusive else bisect_left(times, horizon)
        i = self.position.get(borrower)
        if i is None or i >= k:
            return self.prefix[k]
        return self.prefix[i] | self._range(i + 1, k)

    def _range(self, start: int, stop: int) -> int:
        """The OR of bits[start:stop] from a sparse table (built on first use): two lookups."""
        if start >= stop:
            return 0
        table = self._table
        if table is None:
            table = self._table = [self.bits]
            width = 1
            while 2 * width <= len(self.bits):
                last = table[-1]
                table.append([last[x] | last[x + width] for x in range(len(last) - width)])
                width *= 2
        level = (stop - start).bit_length() - 1
        row = table[level]
        return row[start] | row[stop - (1 << level)]
