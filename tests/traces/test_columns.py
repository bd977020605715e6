"""Column maps: parsing TARGET=SOURCE entries and applying them to a raw table."""

from __future__ import annotations

import pandas as pd
import pytest

from rlix.traces import TraceError, parse_column_map
from rlix.traces.columns import apply_column_map, as_column_map


def test_parse_column_map() -> None:
    entries = ["response_tokens=GeneratedTokens", " pipeline = task "]
    assert parse_column_map(entries) == {"response_tokens": "GeneratedTokens", "pipeline": "task"}


@pytest.mark.parametrize(
    ("entries", "fragment"),
    [
        (["response_tokens"], "is not TARGET=SOURCE"),
        (["=x"], "is not TARGET=SOURCE"),
        (["response_tokens="], "is not TARGET=SOURCE"),
        (["tokens=x"], "'tokens' is not one of the known columns"),
        (["step=a", "step=b"], "names 'step' twice"),
    ],
)
def test_parse_column_map_rejects(entries: list[str], fragment: str) -> None:
    with pytest.raises(TraceError, match=fragment):
        parse_column_map(entries)


def test_apply_column_map_renames_and_replaces_same_named_column() -> None:
    raw = pd.DataFrame({"response_tokens": [1], "out": [7], "other": ["x"]})
    mapped = apply_column_map(raw, {"response_tokens": "out"})
    assert list(mapped.columns) == ["response_tokens", "other"]
    assert mapped["response_tokens"].tolist() == [7]


def test_apply_column_map_missing_source_names_file_and_columns() -> None:
    raw = pd.DataFrame({"a": [1]})
    with pytest.raises(TraceError) as caught:
        apply_column_map(raw, {"response_tokens": "b"}, file="log.csv")
    assert str(caught.value).startswith("log.csv: column map response_tokens=b")
    assert "(columns are: a)" in str(caught.value)


def test_a_column_map_given_as_one_string_is_refused() -> None:
    """A string is an iterable of strings: it was parsed letter by letter ('column map entry
    'r' is not TARGET=SOURCE'), which said nothing of the mistake."""
    with pytest.raises(TraceError, match=r"not the string 'response_tokens=x' \(write \['response_tokens=x'\]\)"):
        as_column_map("response_tokens=x")
    assert as_column_map(["response_tokens=x"]) == {"response_tokens": "x"}
