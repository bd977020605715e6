"""A Ray cluster joined with --address that cannot hold the scenario's topology: one error line
before any actor starts, nothing written (no run folder, no live folder, no parent made). The
local test session (1 node of 4 declared GPUs) stands in for a joined cluster too small for a
topology of 2 nodes x 2 GPUs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlix.executor.run import ExecutorInputError, plan

ray = pytest.importorskip("ray")

TWO_NODES = """
name: two-nodes
seed: 0
topology: {num_nodes: 2, gpus_per_node: 2}
policy: {name: rlix}
trace: {bundled: math_small}
pipelines:
  - id: ft
    kind: full_finetune
    algorithm: grpo
    model: 1.5b
    home: 0-1
    clusters:
      actor_train: {tp: 1, gpus: 0-1}
      actor_infer: {tp: 2, gpus: 0-3}
    prompts_per_step: 2
    samples_per_prompt: 2
    steps: 1
"""


def _plan(tmp_path: Path) -> Any:
    scenario = tmp_path / "two-nodes.yaml"
    scenario.write_text(TWO_NODES)
    return plan(str(scenario))


def test_a_cluster_without_the_topologys_nodes_is_one_line_and_nothing_written(
    ray_session: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlix.executor.cli import main

    scenario = tmp_path / "two-nodes.yaml"
    scenario.write_text(TWO_NODES)
    out = tmp_path / "runs" / "new" / "run"
    assert main(["run", str(scenario), "--out", str(out), "--address", ray_session.address, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"rlix-exec: error: cannot run on the Ray cluster at {ray_session.address}: the scenario's "
                   "topology is 2 node(s) of 2 GPUs (a TP bundle never spans nodes), but the Ray cluster has 1 "
                   "alive node(s) with [4] GPUs, 1 of them with at least 2"], err
    assert not (tmp_path / "runs").exists()
    with pytest.raises(ValueError):
        ray.get_actor("rlix-orchestrator", namespace="rlix")


def test_gpus_the_orchestrator_cannot_reserve_are_one_error_and_nothing_written(
    ray_session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the orchestrator finds at its start (GPUs another job holds, a node gone since
    the check) ends the run as the check would: no run folder of a run that never began."""
    from rlix.executor import cluster_checks, live

    monkeypatch.setattr(cluster_checks, "check_cluster", lambda *args: None)  # as if the cluster changed after it
    out = tmp_path / "runs" / "run"
    with pytest.raises(ExecutorInputError, match=r"topology is 2 node\(s\) of 2 GPUs"):
        live.execute(_plan(tmp_path), out_dir=out, address=ray_session.address, quiet=True)
    assert not (tmp_path / "runs").exists()
    with pytest.raises(ValueError):
        ray.get_actor("rlix-orchestrator", namespace="rlix")


@pytest.fixture()
def another_run(ray_session: Any) -> Any:
    """An orchestrator of another run in the cluster, as a second `rlix-exec run --address` finds it."""
    from rlix.executor.api import start_orchestrator
    from rlix.policy import Topology

    handle = start_orchestrator(Topology(1, 4), tick_s=0.5)
    yield handle
    ray.get(handle.shutdown.remote())
    ray.kill(handle)


def test_a_cluster_with_a_run_going_is_one_line_and_nothing_written(
    ray_session: Any, another_run: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlix.executor.cli import main

    out = tmp_path / "runs" / "run"
    assert main(["run", "cpu-demo", "--out", str(out), "--address", ray_session.address, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "an rlix run is going there already" in err[0], err
    assert not (tmp_path / "runs").exists()
    assert ray.get(another_run.info.remote())["pool"] is not None  # the other run is left alone


def test_a_run_that_began_since_the_check_is_one_error_and_nothing_written(
    ray_session: Any, another_run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlix.executor import cluster_checks, live

    monkeypatch.setattr(cluster_checks, "check_cluster", lambda *args: None)
    out = tmp_path / "runs" / "run"
    with pytest.raises(ExecutorInputError, match="already running in this Ray cluster"):
        live.execute(plan("cpu-demo"), out_dir=out, address=ray_session.address, quiet=True)
    assert not (tmp_path / "runs").exists()
