"""The benches' command lines: a bad count, scenario, trace or plot path is one
`<script>: error: ...` line with status 2 before any run, a plot is drawn only where --plot
asks, and --json is exactly one line on stdout."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.bench.bench_module import BENCH, load


def main(name: str, argv: list[str]) -> Any:
    """bench/<name>.py's main run as `python bench/<name>.py ARGV...` would run it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", [f"bench/{name}.py", *argv])
        return load(name).main()


def refused(capsys: pytest.CaptureFixture[str], name: str, argv: list[str]) -> str:
    """The error line of bench/<name>.py run with `argv`, which must stop with status 2."""
    with pytest.raises(SystemExit) as stop:
        main(name, argv)
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith(f"{name}.py: error: "), lines
    return lines[-1]


def no_runs(*_args: Any, **_kwargs: Any) -> Any:
    raise AssertionError("the bench ran before its options were checked")


MOVE_ROWS = [{"scenario": "tiny", "scale": 1.0, "expand_fixed_s": 2.0, "shrink_fixed_s": 1.0, "ratio": 0.9,
              "rlix_mean_jct_s": 90.0, "rlix_model_mean_jct_s": 100.0, "rlix_loading_share": 0.1,
              "rlix_model_loading_share": 0.2}]
ORDER_ROWS = [{"scenario": "tiny", "variant": "rlix", "mean_jct_s": 90.0, "p95_slowdown": 1.2}]


@pytest.mark.parametrize(("name", "argv", "rows"), [
    ("move_costs", ["--scenario", "tiny", "--scales", "1"], MOVE_ROWS),
    ("job_order", ["--scenario", "tiny"], ORDER_ROWS),
])
def test_no_plot_unless_asked_and_one_where_asked(
    name: str, argv: list[str], rows: list[dict[str, Any]], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    module = load(name)
    monkeypatch.setattr(module, "bench", lambda *_a, **_k: rows)
    monkeypatch.chdir(tmp_path)  # no docs/ here: a default plot path would fail or write one
    assert main(name, [*argv, "--json"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line) == {"rows": rows, "plot": None}
    assert list(tmp_path.iterdir()) == []
    out = tmp_path / "new" / "plot.png"  # its folder is made
    assert main(name, [*argv, "--json", "--plot", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["plot"] == str(out)
    assert out.stat().st_size > 0


@pytest.mark.parametrize(("name", "argv"), [
    ("move_costs", ["--scenario", "tiny", "--scales", "1"]),
    ("job_order", ["--scenario", "tiny"]),
    ("finish_together", ["--scenarios", "tiny", "--gammas", "0", "--seeds", "0"]),
])
def test_a_plot_path_that_cannot_be_written_is_refused_before_the_runs(
    name: str, argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(load(name), "bench", no_runs)
    (tmp_path / "a-file").write_text("")
    line = refused(capsys, name, [*argv, "--plot", str(tmp_path / "a-file" / "plot.png")])
    assert "--plot" in line and "a-file" in line
    line = refused(capsys, name, [*argv, "--plot", str(tmp_path / "plot.nosuch")])
    assert "--plot" in line and "suffix" in line


def test_sweep_speed_checks_its_options(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(load("sweep_speed"), "measure", no_runs)
    assert "--points" in refused(capsys, "sweep_speed", ["--points", "0"])
    assert "--workers" in refused(capsys, "sweep_speed", ["--workers", "0"])
    assert "--workers" in refused(capsys, "sweep_speed", ["--workers", "1,x"])
    assert "no bundled scenario 'nosuch'" in refused(capsys, "sweep_speed", ["--scenario", "nosuch"])


def test_sweep_speed_json_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    sweep_speed = load("sweep_speed")
    monkeypatch.setattr(sweep_speed, "measure", lambda _s, points, workers: {
        "workers": workers, "wall_s": 1.0, "points_per_min": 60.0 * points})
    main("sweep_speed", ["--points", "2", "--workers", "1,2", "--json"])
    captured = capsys.readouterr()
    (line,) = captured.out.splitlines()
    assert [run["workers"] for run in json.loads(line)["runs"]] == [1, 2]
    assert "2 worker(s)" in captured.err


def test_planning_checks_samples_and_prints_one_json_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    planning = load("planning")
    assert "--samples" in refused(capsys, "planning", ["--samples", "0"])

    def fake(gpus: int, pipelines: int, tp: int, policy: str, samples: int, seed: int) -> dict[str, Any]:
        return {"gpus": gpus, "pipelines": pipelines, "tp": tp, "policy": policy, "decisions_per_round": 1.0,
                "shrinks_per_round": 0.0, **{key: 1.0 for key in (
                    "p50_ms", "p99_ms", "wall_p50_ms", "wall_p99_ms", "steady_p50_ms", "steady_p99_ms",
                    "steady_wall_p50_ms", "steady_wall_p99_ms")}}

    monkeypatch.setattr(planning, "measure", fake)
    monkeypatch.setattr(planning, "measure_donor_heavy", lambda *a: {**fake(*a), "setup": "donor-heavy"})
    main("planning", ["--samples", "1", "--json"])
    captured = capsys.readouterr()
    (line,) = captured.out.splitlines()
    assert len(json.loads(line)) == len(planning.CONFIGS) + len(planning.DONOR_HEAVY_CONFIGS)
    assert "worst p99" in captured.err


@pytest.mark.parametrize(("argv", "said"), [
    (["--trace", "nosuch"], "no bundled trace 'nosuch'"),
    (["--trajectories", "0"], "--trajectories"),
    (["--groups", "0"], "--groups"),
    (["--slice-s", "0"], "--slice-s"),
    (["--seed", "-1"], "--seed"),
    (["--model", "70b"], "does not fit"),
    (["--min-engines", "4", "--max-engines", "2"], "--max-engines"),
])
def test_engine_speed_refuses_bad_options(argv: list[str], said: str, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(load("engine_speed"), "run", no_runs)
    assert said in refused(capsys, "engine_speed", argv)


def test_sim_speed_refuses_bad_numbers(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(load("sim_speed"), "run", no_runs)
    assert "--progress-every" in refused(capsys, "sim_speed", ["--scenario", "tiny", "--progress-every", "0"])
    assert "--days" in refused(capsys, "sim_speed", ["--scenario", "tiny", "--days", "inf"])


def test_sim_speed_json_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    main("sim_speed", ["--scenario", "tiny", "--json"])
    captured = capsys.readouterr()
    (line,) = captured.out.splitlines()
    figures = json.loads(line)
    assert figures["bench"] == "sim_speed" and figures["rollouts"] > 0
    assert json.loads(captured.err.splitlines()[-1]) == figures["scaling"][-1]


@pytest.mark.parametrize(("name", "work", "argv", "said"), [
    ("resume_loss", "measure", ["--every", "2,x"], "--every"),
    ("resume_loss", "measure", ["--kill-at", "0"], "--kill-at"),
    ("resume_loss", "measure", ["--kill-at", "36"], "36 adapter steps in all"),  # the run ended first, after a minute
    ("mutation_check", "make_copy", ["--timeout", "0"], "--timeout"),
    ("mutation_check", "make_copy", ["--examples", "0"], "--examples"),
])
def test_other_benches_refuse_bad_counts(name: str, work: str, argv: list[str], said: str,
                                         monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(load(name), work, no_runs)
    assert said in refused(capsys, name, argv)


def test_rlix_differential_refuses_no_situations(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(load("rlix_differential"), "compare", no_runs)
    assert "--situations" in refused(capsys, "rlix_differential", ["--situations", "0", "--rlix", "."])


@pytest.mark.parametrize(("argv", "said"), [
    (["--scenarios", "nosuch"], "argument --scenarios: unknown nosuch"),
    (["--policies", "nosuch"], "argument --policies: unknown nosuch"),
    (["--scenarios", ""], "argument --scenarios: give at least one"),  # it ran nothing and said so with status 0
    (["--policies", ","], "argument --policies: give at least one"),
    (["--seeds", "0"], "argument --seeds"),
    (["--seeds", "1.5"], "argument --seeds"),
])
def test_sharing_names_the_bad_option(argv: list[str], said: str, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(load("sharing"), "bench", no_runs)
    assert said in refused(capsys, "sharing", argv)


@pytest.mark.parametrize(("setting", "said"), [
    # the scenario file's line of its policy was given as the place of the fault
    ("nosuch=1", "argument --set: nosuch=1: unknown field"),
    ("keep_busy_tail=maybe", "argument --set: keep_busy_tail='maybe': input should be a valid boolean"),
    # each run's gamma replaced it without a word
    ("finish_together=3", "argument --set: finish_together is what --gammas sets"),
])
def test_finish_together_names_a_bad_setting_as_set(setting: str, said: str, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(load("finish_together"), "bench", no_runs)
    line = refused(capsys, "finish_together", ["--scenarios", "tiny", "--set", setting])
    assert said in line and ".yaml" not in line


def test_sim_speed_checks_policy_and_paths_before_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(load("sim_speed"), "run", no_runs)
    line = refused(capsys, "sim_speed", ["--scenario", "tiny", "--policy", "nosuch"])
    assert "argument --policy: unknown 'nosuch'" in line and ".yaml" not in line
    (tmp_path / "a-file").write_text("")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "notes.txt").write_text("")
    # each was a traceback, from open_sink at the run's start or from the profile's dump at its end
    for argv, said in [
        (["--tables", "steps", "--out", str(tmp_path / "a-file")], "argument --out"),
        (["--tables", "steps", "--out", str(tmp_path / "theirs")], "argument --out"),
        (["--profile", "--profile-out", str(tmp_path)], "argument --profile-out"),
        (["--profile", "--profile-out", str(tmp_path / "a-file" / "x.prof")], "argument --profile-out"),
        (["--profile-out", str(tmp_path / "x.prof")], "give --profile"),
    ]:
        assert said in refused(capsys, "sim_speed", ["--scenario", "tiny", *argv])
    assert (tmp_path / "theirs" / "notes.txt").exists()


def test_policy_ablation_refuses_a_file_that_is_no_scenario_before_the_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(load("policy_ablation"), "bench", no_runs)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")  # was a traceback from the first run
    line = refused(capsys, "policy_ablation", ["--scenarios", str(bad)])
    assert "--scenarios" in line and "bad.yaml:1: topology: required field missing" in line


@pytest.mark.parametrize(("name", "work"), [("fidelity", "calibrate"), ("repeatability", "run_repeats")])
def test_live_benches_refuse_an_out_they_cannot_make_before_any_run(
    name: str, work: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(load(name), work, no_runs)
    (tmp_path / "a-file").write_text("")
    # each was a traceback from mkdir
    for out in (tmp_path / "a-file", tmp_path / "a-file" / "under"):
        line = refused(capsys, name, ["--out", str(out)])
        assert "--out" in line and "a-file" in line


@pytest.mark.parametrize(("argv", "said"), [
    (["--only", "nosuch"], "argument --only: no mutant's name contains 'nosuch'"),  # was exit 2 and no word
    (["--only", "nosuch", "--list"], "argument --only"),
    (["--ref", "nosuch-ref"], "argument --ref: 'nosuch-ref' is no commit"),  # was git's traceback
    (["--tests", ","], "argument --tests"),
])
def test_mutation_check_says_what_is_wrong_before_copying(argv: list[str], said: str, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(load("mutation_check"), "make_copy", no_runs)
    assert said in refused(capsys, "mutation_check", argv)


def test_mutation_check_refuses_a_test_path_not_in_the_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    mutation_check = load("mutation_check")
    tree = tmp_path / "repo"
    (tree / "tests" / "policy").mkdir(parents=True)
    monkeypatch.setattr(mutation_check, "make_copy", lambda _ref: tree)
    monkeypatch.setattr(mutation_check, "environment", no_runs)
    # the unmutated run failed on it and the bench stopped with status 1
    line = refused(capsys, "mutation_check", ["--tests", "tests/policy,tests/nosuch"])
    assert "argument --tests: no tests/nosuch" in line
    assert not tmp_path.exists()  # the copy is removed


HELPED = sorted(path.stem for path in BENCH.glob("*.py") if path.stem != "rlix_cycle_side")


@pytest.mark.parametrize("name", HELPED)
def test_the_help_explains_every_option_and_shows_a_command(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    parsers: list[argparse.ArgumentParser] = []
    original = argparse.ArgumentParser.print_help

    def keep(parser: argparse.ArgumentParser, file: Any = None) -> None:
        parsers.append(parser)
        original(parser, file)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "print_help", keep)
        with pytest.raises(SystemExit) as stop:
            main(name, ["--help"])
    assert stop.value.code == 0
    # some showed only their docstring's first line, which hid the example and the options' meaning
    assert f"bench/{name}.py" in capsys.readouterr().out
    (parser,) = parsers
    assert [action.dest for action in parser._actions if not action.help] == []


@pytest.mark.parametrize(("argv", "said"), [
    (["--scenario", "tiny", "--at", "nan"], "argument --at"),  # was 'the run of tiny ended before nan s'
    (["--scenario", "tiny", "--at=10,-5"], "argument --at"),  # was a state at -5 s
    (["--at", "10"], "give --scenario"),  # was ignored
])
def test_rlix_differential_checks_at(argv: list[str], said: str, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    rlix_differential = load("rlix_differential")
    monkeypatch.setattr(rlix_differential, "compare", no_runs)
    monkeypatch.setattr(rlix_differential, "run_states", no_runs)
    assert said in refused(capsys, "rlix_differential", [*argv, "--rlix", "."])
