"""The `rlix-sim jobs --plot` bars (rlix.runs.breakdown_plot), on the jobs of test_breakdown.

By hand (see tests/runs/test_breakdown.py): group `m` waits 10 s to start, 10 s for training
GPUs and runs 140 s, so the rest of its run is 130 s, against 80 s alone. `big` has not
finished: no bar. Over all three: queueing 20 / 3, training waits 50 / 3 (big's count), run 140.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rlix.runs.breakdown import breakdown
from rlix.runs.breakdown_plot import plot_breakdown, plot_path, segments
from rlix.runs.errors import RunError
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


@pytest.mark.parametrize(("given", "written"), [
    ("plots", "plots/jobs.png"),  # an existing folder: jobs.png in it
    ("new/", "new/jobs.png"),  # a path ending in a separator: a folder, made
    ("noext", "noext.png"),  # no suffix: PNG, and the name says so
    ("jobs.PDF", "jobs.PDF"),
    ("jobs.svg", "jobs.svg"),
])
def test_the_command_reports_the_file_it_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               given: str, written: str) -> None:
    folder = write_run(two_jobs(), tmp_path / "run", scenario_yaml="name: x\n", plots=False, alone_s=ALONE)
    (tmp_path / "plots").mkdir()
    target = tmp_path / given if not given.endswith("/") else f"{tmp_path / given.rstrip('/')}/"
    assert main(["jobs", str(folder), "--plot", str(target)]) == 0
    out = tmp_path / written
    assert out.stat().st_size > 0
    assert {p for p in tmp_path.rglob("*") if p.is_file() and folder not in p.parents} == {out}
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines()[-1] == f"plot: {out}"
    assert "group" in captured.out  # the tables are printed too


@pytest.mark.parametrize(("given", "message"), [
    ("jobs.xyz", "cannot write a plot as '.xyz'; give the file one of the suffixes .png, .pdf, .svg"),
    ("run/summary.json/jobs.png", "is a file, so nothing can be written under it"),
])
def test_a_bad_plot_path_is_one_line_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     given: str, message: str) -> None:
    folder = write_run(two_jobs(), tmp_path / "run", scenario_yaml="name: x\n", plots=False, alone_s=ALONE)
    before = sorted(tmp_path.rglob("*"))
    assert main(["jobs", str(folder), "--plot", str(tmp_path / given)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # refused before the tables
    assert captured.err.startswith("rlix-sim: error: ") and message in captured.err
    assert len(captured.err.strip().splitlines()) == 1
    assert sorted(tmp_path.rglob("*")) == before


def test_plot_path_needs_no_run(tmp_path: Path) -> None:
    assert plot_path(tmp_path) == tmp_path / "jobs.png"
    assert plot_path(tmp_path / "a" / "b") == tmp_path / "a" / "b.png"
    assert plot_path(tmp_path / "b.tiff") == tmp_path / "b.tiff"
    with pytest.raises(RunError, match=r"cannot write a plot as '\.txt'"):
        plot_path(tmp_path / "b.txt")
    assert not (tmp_path / "a").exists()  # checked, nothing written


@pytest.mark.parametrize("argv", [("RUN", "--plot", ""), ("RUN", "--plot", "  "), ("",)])
def test_an_empty_path_is_refused_not_ignored(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch, argv: tuple[str, ...]) -> None:
    """`--plot ""` wrote no plot and said nothing; an empty RUN_DIR was read as the current folder."""
    monkeypatch.chdir(tmp_path)  # a blank --plot taken as a name would be written here
    folder = write_run(two_jobs(), tmp_path / "run", scenario_yaml="name: x\n", plots=False, alone_s=ALONE)
    with pytest.raises(SystemExit) as exit_:
        main(["jobs", *(str(folder) if a == "RUN" else a for a in argv)])
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "an empty path" in captured.err
    assert len(captured.err.strip().splitlines()) == 1


def test_a_run_where_no_job_finished_is_one_line_and_no_empty_plot(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run cut before any job finished has no bar to draw: it wrote an empty frame (its title
    cut off, with matplotlib's layout warning); now one line, exit 2, and no file."""
    import warnings

    from rlix.scenarios import load_scenario
    from rlix.scenarios.load import validate_scenario
    from rlix.sim import simulate

    cut = load_scenario("tiny").model_dump(mode="json", exclude_none=True) | {"max_time_s": 30.0}
    simulate(validate_scenario(cut), "rlix", seed=0, out=tmp_path / "cut", plots=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["jobs", str(tmp_path / "cut"), "--plot", str(tmp_path / "jobs.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlix-sim: error: ") and "no job in this run finished" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "jobs.png").exists()


def test_thousands_of_groups_still_draw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One bar per job of a long stream (`--by pipeline`): at 0.45 in a row 1,600 jobs would
    need 79,000 px at 110 dpi, past what Agg draws (2^16); rows are squeezed to fit instead.
    Shown here on a cap of 20 inches and 200 groups (the real cap drawn would take half a
    minute)."""
    import matplotlib.image

    from rlix.runs import breakdown_plot

    assert breakdown_plot.MAX_HEIGHT_IN * 110 < 2**16  # the cap itself draws
    monkeypatch.setattr(breakdown_plot, "MAX_HEIGHT_IN", 20.0)
    groups, _ = breakdown(jobs(), waits())
    row = groups[groups["group"] == "m"]
    many = pd.concat([row.assign(group=f"job-{i}") for i in range(200)], ignore_index=True)
    out = plot_breakdown(many, tmp_path / "jobs.png")
    height = matplotlib.image.imread(out).shape[0]
    assert 15 * 110 < height <= 20 * 110  # 200 rows at 0.45 in would be 90 in
