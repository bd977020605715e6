"""The `rlix-sim jobs --plot` bars (rlix.runs.breakdown_plot), on the jobs of test_breakdown.

By hand (see tests/runs/test_breakdown.py): group `m` waits 10 s to start, 10 s for training
GPUs and runs 140 s, so the rest of its run is 130 s, against 80 s alone. `big` has not
finished: no bar. Over all three: queueing 20 / 3, training waits 50 / 3 (big's count), run 140.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlix.runs.breakdown import breakdown
from rlix.runs.breakdown_plot import plot_breakdown, segments
from rlix.runs.folder import write_run
from rlix.sim.cli import main
from tests.runs.test_breakdown import jobs, waits
from tests.runs.test_jobs import ALONE, two_jobs

PNG = b"\x89PNG\r\n\x1a\n"


def test_bars_worked_out_by_hand() -> None:
    groups, _ = breakdown(jobs(), waits())
    parts = segments(groups).set_index("group")
    assert parts.index.tolist() == ["m", "all"]
    assert parts.loc["m"].tolist() == [10.0, 10.0, 130.0, 80.0]
    assert parts.loc["all", "queueing_s"] == pytest.approx(20 / 3)
    assert parts.loc["all", "train_wait_s"] == pytest.approx(50 / 3)
    assert parts.loc["all", "other_run_s"] == pytest.approx(140 - 50 / 3)


def test_without_waits_the_run_is_one_part() -> None:
    groups, _ = breakdown(jobs(), None)
    parts = segments(groups).set_index("group")
    assert parts.loc["m", "train_wait_s"] == 0.0 and parts.loc["m", "other_run_s"] == 140.0


def test_the_plot_is_written(tmp_path: Path) -> None:
    groups, _ = breakdown(jobs(), waits())
    out = plot_breakdown(groups, tmp_path / "sub" / "jobs.png")
    assert out.read_bytes().startswith(PNG)


def test_the_command_writes_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_run(two_jobs(), tmp_path / "run", scenario_yaml="name: x\n", plots=False, alone_s=ALONE)
    assert main(["jobs", str(folder), "--plot", str(tmp_path / "jobs.png")]) == 0
    assert (tmp_path / "jobs.png").read_bytes().startswith(PNG)
    assert "plot: " in capsys.readouterr().err
