"""The orchestrator and pipeline actors on one local Ray session (synthetic workload: the runtime's
own mechanics, no model): grant round trips, crash isolation, kill, forced shrink, dead workers.

Every test checks the run's tables with `rlix.policy.run_checks` (no GPU held twice, holdings
match mappings, no trajectory lost, staleness bounds).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray

from rlix.executor.api import Client, start_orchestrator
from rlix.executor.synthetic import SyntheticWorkload
from rlix.executor.workload import PipelineSetup, ResumeFrom
from rlix.pipelines import AdapterConfig, ProgramConfig
from rlix.policy import ClusterSpec, PipelineKind, PipelineSpec, Topology
from rlix.policy.run_checks import check_run

ALL = (0, 1, 2, 3)


@pytest.fixture(scope="module")
def client(ray_session: object) -> Iterator[Client]:
    handle = start_orchestrator(Topology(1, 4), check_invariants=True, tick_s=0.5)
    yield Client(handle)
    ray.get(handle.shutdown.remote())
    ray.kill(handle)


def synthetic(pid: str, train: tuple[int, ...], steps: int = 2, rollout: tuple[int, ...] = ALL,
              num_prompts: int = 4, **params: Any) -> PipelineSetup:
    spec = PipelineSpec(pid, PipelineKind.FULL_FINETUNE,
                        {"actor_infer": ClusterSpec(1, rollout), "actor_train": ClusterSpec(1, train)})
    program = ProgramConfig(pid, PipelineKind.FULL_FINETUNE, (AdapterConfig("base", steps, 0),),
                            num_prompts=num_prompts, samples_per_prompt=2)
    return PipelineSetup(spec, program, SyntheticWorkload, params, max_batch_per_rank=4)


def specs_of(*setups: PipelineSetup) -> dict[str, PipelineSpec]:
    return {s.pipeline_id: s.spec for s in setups}


def checked_tables(client: Client, specs: dict[str, PipelineSpec]) -> dict[str, list[dict[str, Any]]]:
    tables = ray.get(client.handle.tables.remote(list(specs)))
    check_run(specs, tables["allocations"], tables["rollouts"])
    return tables


def wait_for(predicate: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def pipeline_snapshot(pid: str) -> dict[str, Any]:
    return dict(ray.get(ray.get_actor(f"pipeline-{pid}").snapshot.remote()))


def test_request_to_grant_round_trip(client: Client) -> None:
    spec = PipelineSpec(client.allocate_pipeline_id("api"), PipelineKind.FULL_FINETUNE,
                        {"actor_infer": ClusterSpec(1, ALL), "actor_train": ClusterSpec(1, (2, 3))})
    pid = client.register_pipeline(spec)
    client.admit_pipeline(pid)
    assert client.request(pid, "actor_train", 1) == (2, 3)
    holders = client.snapshot()["holders"]
    assert holders[2] == (pid, "actor_train", -1) and holders[3] == (pid, "actor_train", -1)
    gpus = client.release_and_request(pid, "actor_train", "actor_infer", 6, estimate=8.0)
    assert gpus == ()
    assert sorted(client.active_ranks(pid)) == [0, 1, 2, 3]  # no handler: applied at once
    client.progress(pid, 3.0)
    client.release(pid, "actor_infer")
    # No one needs the GPUs: the ranks stay loaded between rollouts (rlix.policy.warm) ...
    assert client.active_ranks(pid) == {0: (0,), 1: (1,), 2: (2,), 3: (3,)}
    client.train_step_finished(pid, 1)
    # ... until a request maps to them: those on the gang's GPUs are released for it.
    assert client.request(pid, "actor_train", 1) == (2, 3)
    assert client.active_ranks(pid) == {0: (0,), 1: (1,)}
    # A second pipeline's gang request waits behind the first one's hold, then is withdrawn.
    waiter = PipelineSpec("api-waiter", PipelineKind.FULL_FINETUNE,
                          {"actor_infer": ClusterSpec(1, (2, 3)), "actor_train": ClusterSpec(1, (2, 3))})
    client.register_pipeline(waiter)
    client.admit_pipeline("api-waiter")
    pending = client.handle.request.remote("api-waiter", "actor_train", 1)
    time.sleep(0.3)
    client.withdraw("api-waiter", "actor_train")
    assert ray.get(pending) is None
    client.release(pid, "actor_train")
    assert all(h[0] != "api-waiter" for h in client.snapshot()["holders"].values())
    client.remove_pipeline("api-waiter")
    client.remove_pipeline(pid)
    assert client.snapshot()["holders"] == {}
    with pytest.raises(RuntimeError, match="finished"):  # the orchestrator's error itself
        client.request(pid, "actor_train", 1)


def test_a_pipeline_that_raises_is_removed_and_another_goes_on(client: Client) -> None:
    good = synthetic("good", (0, 1), steps=2)
    bad = synthetic("bad", (2, 3), steps=2, fail_stage=["actor_train", 0])
    client.launch(good)
    client.launch(bad)
    status = client.wait_done(timeout_s=240)
    assert status["bad"]["status"] == "failed" and "synthetic failure" in status["bad"]["error"]
    assert status["good"]["status"] == "finished", (status, client.snapshot()["decision_failures"])
    tables = checked_tables(client, specs_of(good, bad))
    good_steps = [r["step"] for r in tables["steps"] if r["pipeline_id"] == "good"]
    assert good_steps == [0, 1]
    completed = [r for r in tables["rollouts"] if r["pipeline_id"] == "good" and r["status"] == "completed"]
    assert len(completed) == 2 * 8
    assert not any(holder[0] in ("good", "bad") for holder in client.snapshot()["holders"].values())


def test_kill_frees_gpus_within_one_decision_round(client: Client) -> None:
    victim = synthetic("victim", (0, 1), steps=50, tokens_per_s=50.0)
    client.launch(victim)
    wait_for(lambda: any(h[0] == "victim" and h[1] == "actor_infer" for h in client.snapshot()["holders"].values()),
             120, "the victim to roll out")
    other = PipelineSpec("other", PipelineKind.FULL_FINETUNE,
                         {"actor_infer": ClusterSpec(1, ALL), "actor_train": ClusterSpec(1, (2, 3))})
    client.register_pipeline(other)
    client.admit_pipeline("other")
    client.request("other", "actor_infer", 6, estimate=1000.0)
    time.sleep(0.5)
    num_lines = len(ray.get(client.handle.event_lines.remote()))
    before = {g for g, h in client.snapshot()["holders"].items() if h[0] == "other"}
    assert client.kill_pipeline("victim")["status"] == "killed"
    holders = client.snapshot()["holders"]
    assert {h[0] for h in holders.values()} == {"other"} and sorted(holders) == list(ALL)
    lines = [json.loads(line) for line in ray.get(client.handle.event_lines.remote(num_lines))]
    removed = [line for line in lines if line["event"]["type"] == "PipelineRemoved"]
    assert removed and removed[0]["event"]["pipeline_id"] == "victim" and removed[0]["event"]["failed"]
    # The round of the removal itself hands every GPU the victim held to the other pipeline.
    expanded = {g for d in removed[0]["decisions"] if d["type"] == "Expand" for g in d["gpus"]}
    assert expanded and before | expanded == set(ALL), (before, [(x["event"], [d["type"] + str(d.get("gpus")) + d["pipeline_id"] for d in x["decisions"]]) for x in lines])
    client.release("other", "actor_infer")
    client.remove_pipeline("other")
    checked_tables(client, {"victim": victim.spec, "other": other})


def test_rlix_exec_kill(client: Client, ray_session: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from rlix.executor.cli import main

    client.launch(synthetic("long", (0, 1), steps=50, tokens_per_s=50.0))
    wait_for(lambda: any(h[0] == "long" for h in client.snapshot()["holders"].values()), 120, "a holding")
    assert main(["kill", "long", "--address", ray_session.address]) == 0
    assert "pipeline long: killed" in capsys.readouterr().out
    assert not any(h[0] == "long" for h in client.snapshot()["holders"].values())
    # Again: nothing is left to kill, and the answer says so rather than "killed" a second time.
    assert main(["kill", "long", "--address", ray_session.address]) == 0
    assert "pipeline long: had already ended, killed (killed on request); nothing to kill" in capsys.readouterr().out
    assert main(["kill", "no-such-pipeline", "--address", ray_session.address]) == 2
    assert "no-such-pipeline" in capsys.readouterr().err


def test_forced_shrink_and_dead_worker_lose_no_trajectory(client: Client) -> None:
    roller = synthetic("roller", (0, 1), steps=2, num_prompts=8, tokens_per_s=40.0, min_tokens=60,
                       max_tokens=100, chunk_tokens=4)
    client.launch(roller)

    def generating() -> dict[str, Any] | None:
        snap = pipeline_snapshot("roller")
        busy = snap["ranks"]["in_flight"]
        return snap if len(busy) == 4 and all(busy.values()) else None

    snap = wait_for(generating, 180, "all four ranks generating")
    # A rollout worker dies mid-call: what it held is re-queued and it is replaced.
    ray.kill(snap["ranks"]["workers"][3])
    # A higher-priority gang request on GPUs 0-1 forces two ranks to shrink mid-rollout.
    trainer = PipelineSpec("trainer", PipelineKind.FULL_FINETUNE,
                           {"actor_infer": ClusterSpec(1, (0, 1)), "actor_train": ClusterSpec(1, (0, 1))})
    client.register_pipeline(trainer)
    client.admit_pipeline("trainer")
    assert client.request("trainer", "actor_train", 1) == (0, 1)
    time.sleep(1.0)
    client.release("trainer", "actor_train")
    client.remove_pipeline("trainer")
    status = client.wait_done(timeout_s=240)
    assert status["roller"]["status"] == "finished", (status["roller"], client.snapshot()["decision_failures"])
    tables = checked_tables(client, {"roller": roller.spec, "trainer": trainer})
    rows = [r for r in tables["rollouts"] if r["pipeline_id"] == "roller"]
    requeued = [r for r in rows if r["status"] == "requeued"]
    completed = {r["trajectory_id"] for r in rows if r["status"] == "completed"}
    assert any(r["dp_rank"] == 3 for r in requeued), "the dead worker's trajectories were re-queued"
    assert {r["trajectory_id"] for r in requeued} <= completed
    assert completed == set(range(2 * 16))
    resumed = [r for r in rows if r["status"] == "completed" and r["preemptions"] > 0]
    assert resumed and any(r["recomputed_tokens"] > 0 for r in resumed), "resumed from their prefix"
    assert any(r["dp_rank"] in (0, 1) for r in requeued), "the preempted ranks re-queued work"


def test_a_pipeline_resumed_past_its_last_step_ends_without_taking_a_gpu(client: Client) -> None:
    """A resume from a checkpoint of the last step: no init, no rollout, finished at once."""
    setup = synthetic("done", (0, 1), steps=2)
    done = dataclasses.replace(setup, program=dataclasses.replace(setup.program, start_steps=(("base", 2),)),
                               resume=ResumeFrom("a checkpoint of step 2"))
    client.launch(done)
    status = client.wait_done(timeout_s=60)
    assert status["done"]["status"] == "finished", status
    tables = checked_tables(client, specs_of(done))
    assert not [r for r in tables["allocations"] if r["pipeline_id"] == "done"]
    assert not [r for r in tables["steps"] if r["pipeline_id"] == "done"]


def test_under_rlix_a_pipeline_loads_its_trainer_before_it_asks_for_the_init(client: Client) -> None:
    """The trainer starts and loads (a synthetic load of `init_s`) before the init request, so
    the init holds its GPUs only for the (synthetic) copy onto them, which takes no time (and
    for its rollout workers' starts)."""
    setup = synthetic("prefetching", (0, 1), steps=1, init_s=1.5)
    start = len(ray.get(client.handle.event_lines.remote()))
    client.launch(setup)
    status = client.wait_done(timeout_s=240)
    assert status["prefetching"]["status"] == "finished", status
    events = [json.loads(line)["event"] for line in ray.get(client.handle.event_lines.remote(start))]
    mine = [e for e in events if e.get("pipeline_id") == "prefetching"]
    admitted = next(e["now"] for e in mine if e["type"] == "PipelineAdmitted")
    asked = next(e["now"] for e in mine if e["type"] == "ClusterRequested" and e["priority"] == 0)
    assert asked - admitted >= 1.5
    checked_tables(client, specs_of(setup))


def test_a_failure_reason_is_one_line_without_colour() -> None:
    """A pipeline whose actor fails to start: Ray's error text holds the remote traceback in
    colour; the state_reason in summary.json is its last line, the error itself."""
    from rlix.executor.actors import failure_reason

    remote = ("\x1b[36mray::PipelineActor.__init__()\x1b[39m (pid=1)\nTraceback (most recent call last):\n"
              '  File "x.py", line 3, in load\n    raise SafetensorError("bad header")\n'
              "safetensors_rust.SafetensorError: Error while deserializing header: bad header\n")
    reason = failure_reason(RuntimeError(remote))
    assert reason == "RuntimeError: safetensors_rust.SafetensorError: Error while deserializing header: bad header"
    assert failure_reason(ValueError("plain")) == "ValueError: plain" and failure_reason(KeyError()) == "KeyError"
