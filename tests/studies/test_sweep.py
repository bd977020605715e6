"""`rlix-sim sweep`: rows equal single runs, resume runs nothing twice, bad input is one line,
a failed point is recorded and the sweep goes on, and points run on a two-node Ray cluster."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from rlix.scenarios import load_scenario
from rlix.sim import simulate
from rlix.sim.cli import main
from rlix.studies import parse_grid, run_sweep
from rlix.studies.cli import read_sweep_file
from rlix.studies.sweep import flatten
from rlix.traces.options import UsageError

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    from rlix.executor import session

    if ray.is_initialized():
        ray.shutdown()
    session.start(num_gpus=0, num_cpus=2, record_address=False)
    yield
    ray.shutdown()


def test_rows_equal_single_runs_and_resume_runs_nothing_twice(local_ray: None, tmp_path: Path) -> None:
    grid = parse_grid(["policy=rlix,static", "pipelines.*.steps=1,2"])
    base = load_scenario("tiny")
    result = run_sweep(base, grid, tmp_path / "sweep")
    assert result.num_run == 4 and result.num_failed == 0
    rows = result.rows.set_index("point_id")
    for point in grid.points(base):
        expected = flatten(simulate(point.scenario, plots=False, alone=True).summary)
        row = rows.loc[point.point_id]
        assert row["policy"] == point.values["policy"]
        for key, value in expected.items():
            if isinstance(value, float):
                assert row[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
            elif value is not None:
                assert row[key] == value, key
    again = run_sweep(base, grid, tmp_path / "sweep")
    assert again.num_run == 0 and again.num_skipped == 4
    pd.testing.assert_frame_equal(again.rows, result.rows, check_dtype=False)


def test_streamed_points_give_the_same_rows_and_keep_only_the_tables_named(local_ray: None, tmp_path: Path) -> None:
    grid = parse_grid(["policy=rlix,static"])
    base = load_scenario("tiny")
    full = run_sweep(base, grid, tmp_path / "full").rows.set_index("point_id")
    streamed = run_sweep(base, grid, tmp_path / "streamed", tables=frozenset({"steps"})).rows.set_index("point_id")
    kept = run_sweep(base, grid, tmp_path / "kept", keep_runs=True, tables=frozenset({"steps"}))
    for point_id, row in full.iterrows():
        for key, value in row.items():
            if key == "ray_node" or not isinstance(value, float):
                continue
            assert streamed.loc[point_id, key] == pytest.approx(value, rel=1e-12, abs=1e-12, nan_ok=True), key
    for point_id in kept.rows["point_id"]:
        folder = tmp_path / "kept" / "runs" / point_id
        assert (folder / "steps.parquet").exists() and (folder / "summary.json").exists()
        assert not (folder / "rollouts.parquet").exists() and not (folder / "allocations.parquet").exists()
    assert not (tmp_path / "streamed" / "runs").exists()


def test_a_failed_point_is_recorded_and_the_rest_goes_on(local_ray: None, tmp_path: Path) -> None:
    from rlix.traces import load_bundled

    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    load_bundled("math_small").to_csv(good, index=False)
    bad.write_text("a,b\n1,2\n")  # a file that exists, its columns read only when the point runs
    grid = parse_grid([f"pipelines.0.trace={{path: {good}}},{{path: {bad}}}"])
    result = run_sweep(load_scenario("tiny"), grid, tmp_path / "sweep")
    # a mapping axis is a text column (its JSON), in the rows and in results.parquet
    status = {json.loads(point)["path"]: s for point, s in zip(result.rows["pipelines.0.trace"], result.rows["status"],
                                                               strict=True)}
    assert status == {str(good): "ok", str(bad): "failed"}
    assert "response_tokens" in result.rows.set_index("status").loc["failed", "error"]
    assert run_sweep(load_scenario("tiny"), grid, tmp_path / "sweep").num_run == 1  # resume tries the failed one again


def test_the_command_says_why_the_first_point_failed(
    local_ray: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    assert main(["sweep", "tiny", "--grid", f"pipelines.0.trace={{path: {bad}}}", "--out", str(tmp_path / "sweep"),
                 "--quiet", "--no-plots"]) == 1
    captured = capsys.readouterr()
    assert "1 failed" in captured.out
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("first failed point ") and "response_tokens" in line


@pytest.mark.parametrize(("grid", "words"), [
    (["nope.deeper=1"], "names no field"),
    (["pipelines.7.steps=1"], "is not an index"),
    (["pipelines.*.steps=zero"], "grid point"),
    (["policy=nosuch"], "grid point"),
    (["costs.linear_floor_tp2_s=0.003,1.0"], "linear_floor_tp2_s"),  # the cost model refuses 1.0 s
    (["costs.lod_s=1"], "did you mean 'load_s'"),
    (["steps"], "KEY=V1,V2"),
])
def test_bad_axes_are_refused_before_anything_runs(grid: list[str], words: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=words):
        run_sweep(load_scenario("tiny"), parse_grid(grid), tmp_path / "sweep")
    assert not (tmp_path / "sweep").exists()


def test_grid_values_read_as_yaml_and_exponents_as_numbers() -> None:
    """PyYAML reads 1e9 as a string (YAML 1.1 wants 1.0e+9); a --grid value means the number."""
    grid = parse_grid(["policy.config.alike_reserve_homes=2,1e9,2.5E-1", "policy.config.job_order=shortest,arrival"])
    assert grid.axes["policy.config.alike_reserve_homes"] == [2, 1e9, 0.25]
    assert grid.axes["policy.config.job_order"] == ["shortest", "arrival"]
    points = grid.points(load_scenario("tiny"))
    assert [p.scenario.policy.config.alike_reserve_homes for p in points[::2]] == [2, 1e9, 0.25]


def test_a_grid_sets_any_cost_constant() -> None:
    """tiny's `costs:` is empty: a constant it does not set is still a field a grid may sweep."""
    points = parse_grid(["costs.load_s=1,4"]).points(load_scenario("tiny"))
    assert [p.scenario.costs for p in points] == [{"load_s": 1.0}, {"load_s": 4.0}]


def test_sweep_files_read_exponents_as_numbers(tmp_path: Path) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text("scenario: tiny\ngrid:\n  policy.config.alike_reserve_homes: [2, 1e9]\n  seed: [0, 1]\n")
    spec = read_sweep_file(str(path))
    grid = parse_grid([], spec["grid"])
    assert grid.axes["policy.config.alike_reserve_homes"] == [2, 1e9]
    assert grid.num_points == 4
    assert {p.scenario.policy.config.alike_reserve_homes for p in grid.points(load_scenario(spec["scenario"]))} == {2, 1e9}


def test_the_cli_refuses_another_sweeps_folder_and_a_bad_address(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "sweep.json").write_text('{"scenario": {}, "grid": {}}')
    assert main(["sweep", "tiny", "--grid", "seed=0", "--out", str(out), "--quiet"]) == 2
    assert "holds another sweep" in capsys.readouterr().err
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("mine")
    assert main(["sweep", "tiny", "--grid", "seed=0", "--out", str(tmp_path / "other"), "--quiet"]) == 2
    assert "not a sweep folder" in capsys.readouterr().err
    assert (tmp_path / "other" / "x.txt").read_text() == "mine"


def test_points_run_on_a_two_node_cluster(tmp_path: Path) -> None:
    cluster_utils = pytest.importorskip("ray.cluster_utils")
    from rlix.executor import session

    if ray.is_initialized():
        ray.shutdown()
    session._loopback_switch(True)
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    try:
        cluster.wait_for_nodes()
        grid = parse_grid(["seed=0,1,2,3"])
        result = run_sweep(load_scenario("tiny"), grid, tmp_path / "sweep", address=cluster.address)
        assert result.num_run == 4 and result.num_failed == 0
        assert result.rows["ray_node"].nunique() == 2  # one CPU a node: the points spread
    finally:
        ray.shutdown()
        cluster.shutdown()


ONE_PIPELINE = """\
name: t2
topology: {num_nodes: 1, gpus_per_node: 4, gpu: h100}
trace: {bundled: math_small, max_response_tokens: 4096}
pipelines:
  - id: ft
    kind: full_finetune
    model: 1.5b
    home: 0-1
    clusters:
      actor_train: {tp: 1, gpus: home}
      actor_infer: {tp: 1, gpus: pool}
    prompts_per_step: 4
    samples_per_prompt: 4
    steps: 2
"""


def test_an_axis_of_text_and_numbers_is_saved_as_text_and_resumes(local_ray: None, tmp_path: Path) -> None:
    (tmp_path / "t2.yaml").write_text(ONE_PIPELINE)
    base = load_scenario(tmp_path / "t2.yaml")
    grid = parse_grid(["pipelines.0.home=0-1,2"])
    result = run_sweep(base, grid, tmp_path / "sweep")
    assert result.num_run == 2 and result.num_failed == 0
    saved = pd.read_parquet(tmp_path / "sweep" / "results.parquet")
    assert sorted(saved["pipelines.0.home"]) == ["0-1", "2"] and list(saved["status"]) == ["ok", "ok"]
    again = run_sweep(base, grid, tmp_path / "sweep")
    assert again.num_run == 0 and again.num_skipped == 2


def test_a_damaged_results_file_is_one_line_and_a_cut_write_keeps_the_rows(
    local_ray: None, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlix.studies import sweep

    out = tmp_path / "sweep"
    assert main(["sweep", "tiny", "--grid", "seed=0", "--out", str(out), "--quiet", "--no-plots"]) == 0
    results = out / "results.parquet"
    before = results.read_bytes()

    def cut(frame: pd.DataFrame, path: Path, **kwargs: object) -> None:
        Path(path).write_bytes(b"PAR1 cut short")
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_parquet", cut)
    with pytest.raises(KeyboardInterrupt):
        sweep._write_rows(pd.DataFrame({"point_id": ["x"]}), results)
    left = sorted(p.name for p in out.iterdir() if p.name != sweep.LOCK_FILE)
    assert results.read_bytes() == before and left == ["results.parquet", "sweep.json"]
    monkeypatch.undo()
    capsys.readouterr()
    with results.open("r+b") as f:
        f.truncate(100)
    assert main(["sweep", "tiny", "--grid", "seed=0", "--out", str(out), "--quiet", "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"rlix-sim: error: {results}: ")
    assert "remove it" in err and "--out" in err


@pytest.mark.parametrize("body_interrupted", [False, True])
def test_a_ctrl_c_during_ray_shutdown_waits_for_it_then_stops(
    body_interrupted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second Ctrl-C that cut ray.shutdown short left Ray half torn down: the sweep then ended
    with status 1 or a segfault at exit instead of 130."""
    import os
    import signal
    import time

    from rlix.executor import session
    from rlix.studies import sweep

    shut_down: list[bool] = []

    def shutdown() -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # where the interrupt would land
        shut_down.append(True)

    monkeypatch.setattr(session, "start", lambda **kwargs: None)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "shutdown", shutdown)
    previous = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), sweep._ray_session(None, 1):
        if body_interrupted:
            raise KeyboardInterrupt
    assert shut_down == [True]
    assert signal.getsignal(signal.SIGINT) is previous


def test_a_claim_cut_short_leaves_no_sweep_json_to_refuse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sweep.json was written in place: cut during the write, it was left half written, and
    every later run of the sweep refused its folder ('cannot read sweep.json')."""
    from rlix.studies import sweep

    identity = {"scenario": {"name": "t"}, "grid": {"seed": [0, 1]}}
    write_text = Path.write_text

    def cut(path: Path, text: str, *args: object, **kwargs: object) -> int:
        write_text(path, text[:10])
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", cut)
    with pytest.raises(KeyboardInterrupt):
        sweep._claim_folder(tmp_path / "sweep", identity)
    monkeypatch.undo()
    assert list((tmp_path / "sweep").iterdir()) == []
    assert sweep._done_rows(tmp_path / "sweep", identity) == {}
    sweep._claim_folder(tmp_path / "sweep", identity)
    assert json.loads((tmp_path / "sweep" / "sweep.json").read_text()) == identity


def test_a_folder_another_sweep_is_writing_is_refused(local_ray: None, tmp_path: Path) -> None:
    """Two sweeps into one folder would each rewrite results.parquet with their own rows."""
    import fcntl

    from rlix.studies.sweep import LOCK_FILE

    out = tmp_path / "sweep"
    grid = parse_grid(["seed=0,1"])
    run_sweep(load_scenario("tiny"), parse_grid(["seed=0,1"]), out)
    (out / "results.parquet").unlink()  # as if the first sweep were still at it
    with open(out / LOCK_FILE, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(UsageError, match="another sweep is running into this folder"):
            run_sweep(load_scenario("tiny"), grid, out)
    assert not (out / "results.parquet").exists()
    assert run_sweep(load_scenario("tiny"), grid, out).num_run == 2  # the lock went with its holder
