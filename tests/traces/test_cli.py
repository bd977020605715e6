"""`rlix-sim trace inspect | generate | fit`: output, one-line errors, exit codes, help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from rlix.sim.cli import main
from rlix.traces import read_trace

from .conftest import AZURE_MAP


def test_inspect_azure_json(azure_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    columns = [arg for entry in AZURE_MAP for arg in ("--column", entry)]
    code, out, err = run_cli("trace", "inspect", azure_path, *columns, "--json")
    assert (code, err) == (0, "")
    stats = json.loads(out)
    assert list(stats)[:7] == ["rows", "mean", "p50", "p90", "p99", "max", "top10_token_share"]
    # The figures /work/shared/traces/README.md gives for this log.
    assert (stats["rows"], stats["p50"], stats["p99"], stats["max"]) == (19_366, 129, 601, 1000)
    assert 0.2 < stats["top10_token_share"] < 0.3  # a short tail, unlike agentic RL


def test_inspect_text_with_pipelines(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "t.csv"
    path.write_text("pipeline,response_tokens\na,10\nb,30\nb,40\n")
    code, out, _ = run_cli("trace", "inspect", path)
    assert code == 0
    assert "3 rows" in out and "longest 10% of samples carry" in out
    assert "\n  a " in out and "\n  b " in out
    path.write_text("response_tokens\n42\n")
    assert run_cli("trace", "inspect", path)[1].startswith(f"{path}: 1 row\n")


def test_inspect_takes_a_bundled_traces_name(run_cli) -> None:  # type: ignore[no-untyped-def]
    """A name that is no file but a bundled trace is read from the package; the figures are the
    trace's own (the same as reading its Parquet file)."""
    from rlix.traces import load_bundled
    from rlix.traces.stats import trace_stats

    code, out, _ = run_cli("trace", "inspect", "agentic_small", "--json")
    assert code == 0
    assert json.loads(out) == json.loads(json.dumps(trace_stats(load_bundled("agentic_small")).as_dict()))
    code, _, err = run_cli("trace", "inspect", "agentic_smal")
    assert code == 2
    assert "agentic_smal: no such file, nor a bundled trace (agentic_small, math_16k, math_small)" in err


def test_generate_is_deterministic_and_readable(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    paths = [tmp_path / "a.parquet", tmp_path / "b.parquet"]
    for path in paths:
        code, out, _ = run_cli(
            "trace",
            "generate",
            "agentic",
            "--rows",
            500,
            "--seed",
            9,
            "--pipeline",
            "agent",
            "--out",
            path,
        )
        assert code == 0 and out.startswith(f"wrote {path}")
    pd.testing.assert_frame_equal(read_trace(paths[0]), read_trace(paths[1]))
    assert read_trace(paths[0])["pipeline"].unique().tolist() == ["agent"]


def test_fit(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    summary = tmp_path / "summary.csv"
    summary.write_text(
        "step,response_length/mean,response_length/max,response_length/clip_ratio\n"
        "0,900,4096,0.01\n1,1100,4096,0.03\n"
    )
    out_path = tmp_path / "fitted.jsonl"
    code, _, _ = run_cli("trace", "fit", summary, "--samples-per-step", 500, "--out", out_path)
    assert code == 0
    assert len(read_trace(out_path)) == 1000


def test_fit_warns_of_a_mean_out_of_reach_and_still_writes(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """Step 1's mean of 10 under a max of 4000 is out of the model's reach (clip 0: no lognormal
    of 1024 samples has both): one warning line names it, logged and fitted, and the trace that
    is written anyway."""
    summary = tmp_path / "summary.csv"
    summary.write_text("step,mean,max,clip_ratio\n0,900,4096,0.01\n1,10,4000,0\n")
    out_path = tmp_path / "fitted.csv"
    code, out, err = run_cli("trace", "fit", summary, "--out", out_path)
    assert code == 0 and out.startswith(f"wrote {out_path}")
    assert err.startswith(f"rlix-sim: warning: {summary}: the fitted mean misses the logged one at 1 of 2 steps")
    assert "line 3, step 1: logged 10, fitted 20.5 (+105%)" in err
    assert err.endswith(f"{out_path} was written anyway, with the fitted means at those steps\n")
    assert err.count("\n") == 1
    assert len(read_trace(out_path)) == 2048


def test_fit_of_a_reachable_log_says_nothing_on_stderr(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    summary = tmp_path / "summary.csv"
    summary.write_text("step,mean,max,clip_ratio\n0,900,4096,0.01\n1,500,3000,0\n")
    code, _, err = run_cli("trace", "fit", summary, "--out", tmp_path / "fitted.csv")
    assert (code, err) == (0, "")


def test_interrupted_generate_keeps_the_old_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    """Ctrl-C while `generate` writes over a trace: exit 130, the old trace whole, no leftovers."""
    path = tmp_path / "trace.csv"
    assert run_cli("trace", "generate", "math", "--rows", 50, "--out", path)[0] == 0
    before = path.read_bytes()

    def to_csv(self: pd.DataFrame, file: Path, *args: object, **kwargs: object) -> None:
        Path(file).write_text("response_tokens\n1")
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_csv", to_csv)
    code, _, _ = run_cli("trace", "generate", "math", "--rows", 80, "--out", path)
    assert code == 130
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["trace.csv"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["trace", "inspect", "{tmp}/absent.csv"], "absent.csv: no such file"),
        (["trace", "inspect", "{tmp}/bad.csv"], "bad.csv, line 3, column"),
        (["trace", "inspect", "{tmp}/bad.csv", "--column", "steps=x"], "column map target"),
        (["trace", "fit", "{tmp}/bad.csv", "--out", "{tmp}/o.csv"], "summary has no mean"),
        (["trace", "fit", "{tmp}/bad.csv", "--max-tokens", "5", "--out", "{tmp}/o.csv"], "no mean"),
    ],
)
def test_errors_are_one_line_and_exit_2(
    tmp_path: Path,
    run_cli,
    args: list[str],
    fragment: str,  # type: ignore[no-untyped-def]
) -> None:
    (tmp_path / "bad.csv").write_text("response_tokens\n3\n-1\n")
    code, out, err = run_cli(*[a.format(tmp=tmp_path) for a in args])
    assert code == 2 and out == ""
    assert err.startswith("rlix-sim: error: ") and err.count("\n") == 1
    assert fragment in err


def test_traceback_on_request(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    from rlix.traces import TraceError

    with pytest.raises(TraceError):
        run_cli("trace", "inspect", tmp_path / "absent.csv", "--traceback")


def test_installed_entry_point_exit_code(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("rlix-sim")
    if not script.exists():
        pytest.skip(f"rlix-sim entry point not installed next to {sys.executable}")
    env = {k: v for k, v in os.environ.items() if k != "RLIX_DEBUG"}
    done = subprocess.run(
        [script, "trace", "inspect", tmp_path / "absent.csv"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().endswith("absent.csv: no such file")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("action", [[], ["inspect"], ["generate"], ["fit"]])
def test_help_teaches_with_examples(action: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["trace", *action, "--help"])
    assert done.value.code == 0
    assert "rlix-sim trace " in capsys.readouterr().out.split("example")[1]


@pytest.mark.parametrize(
    ("action", "shown"),
    [("inspect", "longest 10% of samples"), ("generate", "~40% of tokens in the longest 10%,")],
)
def test_help_shows_percent_signs_once(
    action: str, shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["trace", action, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert shown in text and "%%" not in text


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["generate", "math", "--seed", "-1"], "argument --seed: must be 0 or more, not '-1'"),
        (["generate", "math", "--rows", "0"], "argument --rows: must be a positive integer"),
        (["generate", "math", "--rows", "1000000000"], "argument --rows: at most 100,000,000 rows, not '1000000000'"),
        (["generate", "math", "--max-tokens", "0"], "argument --max-tokens: must be a positive"),
        (["fit", "s.csv", "--seed", "-1"], "argument --seed: must be 0 or more, not '-1'"),
        (["fit", "s.csv", "--max-tokens", "0"], "argument --max-tokens: must be a positive"),
        (["fit", "s.csv", "--samples-per-step", "x"], "--samples-per-step: must be an integer"),
    ],
)
def test_bad_option_is_one_line_at_parsing(
    args: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _parse_error(["trace", *args, "--out", "o.csv"], capsys)
    assert err.startswith(f"rlix-sim trace {args[0]}: error: ") and fragment in err


def _parse_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line argparse writes for `argv`, which it refuses (exit 2, nothing on stdout)."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    return err


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["inspect", ""], "argument FILE"),
        (["fit", " ", "--out", "o.csv"], "argument SUMMARY"),
        (["generate", "math", "--out", ""], "argument --out"),
    ],
)
def test_an_empty_path_is_named_as_such(
    args: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty path is not the current folder: it was said to be '.: is a directory'."""
    assert f"{named}: an empty path" in _parse_error(["trace", *args], capsys)


@pytest.mark.parametrize(
    ("action", "work"),
    [(["generate", "math", "--rows", "10"], "generate"), (["fit", "s.csv"], "fit_trace")],
)
def test_an_output_suffix_of_no_format_is_refused_before_any_work(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    run_cli: Callable[..., tuple[int, str, str]],
    action: list[str],
    work: str,
) -> None:
    """A long generate or fit must not run to its end only to learn that `.txt` is no format."""
    import rlix.traces.cli as trace_cli

    def must_not_run(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"{work} ran before the output was checked")

    monkeypatch.setattr(trace_cli, work, must_not_run)
    code, out, err = run_cli("trace", *action, "--out", tmp_path / "t.txt")
    assert code == 2 and out == ""
    assert "t.txt: cannot tell the format from the suffix '.txt'" in err
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_suffix_points_at_format_only_where_it_names_the_file_s_format(
    tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    """fit's --format is its output's: for its summary, and for `run --trace`, whose --format is
    the run tables', the hint sent the user to an option that does not read the file."""
    from rlix.traces import TraceError

    (tmp_path / "s.txt").write_text("mean,max,clip_ratio\n1000,4096,0.01\n")
    code, _, err = run_cli("trace", "fit", tmp_path / "s.txt", "--out", tmp_path / "o.csv")
    assert code == 2 and "s.txt: cannot tell the format from the suffix '.txt'" in err
    assert "--format" not in err
    with pytest.raises(TraceError) as raised:
        read_trace(tmp_path / "s.txt")
    assert "--format" not in str(raised.value)
    code, _, err = run_cli("trace", "inspect", tmp_path / "s.txt")
    assert code == 2 and err.rstrip().endswith("or name the format (--format)")


def test_fit_will_not_write_its_trace_over_the_summary_it_reads(
    tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    """`fit log.csv --out log.csv` replaced the user's log, the run's only figures, by the trace."""
    summary = tmp_path / "log.csv"
    summary.write_text("mean,max,clip_ratio\n1000,4096,0.01\n")
    before = summary.read_bytes()
    code, out, err = run_cli("trace", "fit", summary, "--out", tmp_path / "." / "log.csv")
    assert code == 2 and out == ""
    assert err.strip().endswith("is the summary log itself; the trace would replace it")
    assert summary.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["log.csv"]


def test_an_interrupted_generate_leaves_no_folder_it_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    """--out in folders that do not exist yet: they are made for the write, and went on
    existing, empty, after a Ctrl-C or a failed write."""

    def to_csv(self: pd.DataFrame, file: Path, *args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_csv", to_csv)
    (tmp_path / "runs").mkdir()
    code, _, _ = run_cli("trace", "generate", "math", "--rows", 8, "--out", tmp_path / "runs/new/sub/t.csv")
    assert code == 130
    assert [p.name for p in tmp_path.rglob("*")] == ["runs"]
