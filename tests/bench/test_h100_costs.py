"""bench/h100_costs.py: the default H100 cost model against the published figures."""

from __future__ import annotations

import json

import pytest

from tests.bench.bench_module import load

pytest.importorskip("rlix.sim.engine")


def test_fitted_rows_reproduce_their_inputs_and_predictions_stay_close() -> None:
    bench = load("h100_costs")
    rows = bench.linear_rows()
    fitted = [r for r in rows if r["kind"] == "fitted"]
    predicted = [r for r in rows if r["kind"] == "predicted"]
    assert len(fitted) == 7 and len(predicted) == 2
    assert all(r["error"] < 1e-9 for r in fitted)
    # the fit's two predictions of points it never saw (WORKLOADS.md: 1.3 and 8.4 ms)
    assert all(r["error"] < 0.1 for r in predicted)


def test_offline_throughput_is_a_decode_bound_figure() -> None:
    bench = load("h100_costs")
    short = bench.offline_tokens_per_s(128, 128, num_requests=300)
    long = bench.offline_tokens_per_s(1024, 1024, num_requests=300)
    # a longer context reads more KV cache per iteration: fewer tokens a second
    assert 1_000 < long < short < 50_000


def test_json_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load("h100_costs")
    monkeypatch.setattr(bench, "SHAPES", ((128, 128),))
    assert bench.main(["--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows[-1]["kind"] == "end to end" and rows[-1]["published"] == 5777.0
