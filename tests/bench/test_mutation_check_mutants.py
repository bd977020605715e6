"""bench/mutation_check.py's hand list still fits the code: each mutant's text occurs exactly
once in its file. When code moves (the split's and the reservations' checks left
rlix/policy/invariants.py), the bench stops at its pre-check; this says so in CI instead,
without running any mutant."""

from __future__ import annotations

from collections import Counter

from tests.bench.bench_module import BENCH, load

REPO = BENCH.parent


def test_every_mutant_text_occurs_exactly_once_in_its_file() -> None:
    mutants = load("mutation_check").MUTANTS
    texts: dict[str, str] = {}
    drifted = []
    for m in mutants:
        if m.path not in texts:
            texts[m.path] = (REPO / m.path).read_text()
        count = texts[m.path].count(m.old)
        if count != 1:
            drifted.append(f"{m.name!r}: {count} times in {m.path}")
    assert drifted == [], "update these mutants to where the code is now: " + "; ".join(drifted)


def test_every_mutant_changes_something_and_has_its_own_name() -> None:
    mutants = load("mutation_check").MUTANTS
    assert [m.name for m in mutants if m.old == m.new] == []
    assert [name for name, n in Counter(m.name for m in mutants).items() if n > 1] == []  # --only picks by name
