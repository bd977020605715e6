"""Bundled traces: present as package data, small, valid, and equal to a fresh generation."""

from __future__ import annotations

from importlib import resources

import pandas.testing as pdt
import pytest

from rlix.traces import TraceError, bundled_names, load_bundled
from rlix.traces.bundled import BUNDLED
from rlix.traces.stats import top_share


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_bundled_equals_fresh_generation(name: str) -> None:
    # If this fails after a deliberate generator change: python -m rlix.traces.bundled --regenerate
    pdt.assert_frame_equal(load_bundled(name), BUNDLED[name].generate())


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_bundled_file_is_package_data_and_small(name: str) -> None:
    resource = resources.files("rlix.traces").joinpath("data", f"{name}.parquet")
    assert resource.is_file()
    assert len(resource.read_bytes()) < 1_000_000


def test_bundled_agentic_tail_share() -> None:
    trace = load_bundled("agentic_small")
    assert 0.35 <= top_share(trace["response_tokens"].to_numpy()) <= 0.50
    assert trace["capped"].any()
    assert {"pipeline", "step", "group"} <= set(trace.columns)


def test_names_and_unknown_name() -> None:
    assert bundled_names() == ["agentic_small", "math_16k", "math_small"]
    with pytest.raises(TraceError, match="no bundled trace 'chat'"):
        load_bundled("chat")
