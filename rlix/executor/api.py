"""Python API of the executor: start or reach the orchestrator, drive a pipeline by hand.

    import rlix
    client = rlix.init(num_gpus=4)                  # local Ray, loopback only; or address="..."
    pid = client.allocate_pipeline_id("mine")
    client.register_pipeline(spec, handler=None)    # a PipelineSpec; handler: see below
    client.admit_pipeline(pid)
    gpus = client.request(pid, "actor_train", 0)    # blocks until the grant is applied (Ctrl-C: taken back)
    client.release_and_request(pid, "actor_train", "actor_infer", 6, estimate=64)
    ranks = client.active_ranks(pid)                # handler-less pipelines poll their ranks
    client.progress(pid, 12) ; client.train_step_finished(pid, 1) ; client.remove_pipeline(pid)
    client.write_run("runs/mine")                   # the run folder, as `rlix-exec run` writes it

A handler is an actor with `async expand(dp_rank, gpus)`, `async shrink(dp_rank, gpus,
reason)` and `async revoke(cluster, dp_rank, gpus)` (`RankHandler` is a base class to start
from); the orchestrator calls it to carry out the core's rollout decisions. An expand or
shrink that takes longer than `register_pipeline(..., handler_timeout_s=900)` kills the
pipeline and its handler, so a hung engine cannot keep its GPUs from the others; so do three
of its shrinks failed in a row (one that raises is retried after a back-off). A pipeline that
follows the built-in step sequence instead supplies a workload class and is launched with
`client.launch(PipelineSetup(...))`: it then runs the shared program in its own actor, with
its own tasks and rewards from the `rlix.executor.ml.registry` decorators (see
examples/custom_pipeline.py).

The orchestrator is a named actor (`rlix-orchestrator` in namespace `rlix`), so any driver
connected to the same Ray cluster reaches it with `rlix.init(address=...)`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayTaskError

from rlix.executor import session
from rlix.executor.external import DEFAULT_HANDLER_TIMEOUT_S
from rlix.executor.orchestrator import ORCHESTRATOR_NAME, Orchestrator
from rlix.executor.placement import PlacementError, control_options
from rlix.executor.workload import PipelineSetup
from rlix.policy.config import PolicyConfig
from rlix.policy.errors import PolicyError
from rlix.policy.specs import PipelineSpec, Topology
from rlix.runs.codec import spec_to_dict

RemoteOrchestrator = ray.remote(Orchestrator)

#: What the orchestrator raises on a bad call (the core's EventError / SpecError, an unknown or
#: ended pipeline, a taken id, a wait that timed out): the caller gets it as itself, one line it
#: can catch by type, not inside Ray's wrapper with the actor's traceback (which is only news
#: when the orchestrator itself is at fault, so other errors keep it).
CALLER_ERRORS = (PolicyError, ValueError, KeyError, RuntimeError, TimeoutError, TypeError)


def start_orchestrator(topology: Topology, policy: str = "rlix", config: PolicyConfig | None = None,
                       name: str = ORCHESTRATOR_NAME, check_invariants: bool = False,
                       tick_s: float = 1.0, record: Any = None) -> Any:
    """Start the named orchestrator on this driver's node and reserve the topology's GPUs.
    `record`: the Recorder of a cut run that this one continues (see Orchestrator)."""
    handle, ready = launch_orchestrator(topology, policy, config, name, check_invariants, tick_s, record)
    try:
        Client._get(ready)
    except BaseException:
        # Its name would otherwise stay taken by an orchestrator that cannot run, and the
        # next `rlix.init` would hand the caller that one.
        ray.kill(handle)
        raise
    return handle


def launch_orchestrator(topology: Topology, policy: str = "rlix", config: PolicyConfig | None = None,
                        name: str = ORCHESTRATOR_NAME, check_invariants: bool = False,
                        tick_s: float = 1.0, record: Any = None) -> tuple[Any, Any]:
    """`start_orchestrator` without the wait: the actor's handle and the reference that is
    ready once it is set up (a driver that takes stop signals waits for it under them)."""
    try:
        ray.get_actor(name, namespace=session.NAMESPACE)
    except ValueError:
        pass
    else:
        raise OrchestratorExists(f"an orchestrator named {name!r} is already running in this Ray cluster "
                                 "(one rlix run per Ray cluster)")
    handle = RemoteOrchestrator.options(
        name=name, namespace=session.NAMESPACE, max_concurrency=10_000, **control_options()
    ).remote(topology, policy, config, check_invariants, record)
    return handle, handle.setup.remote(tick_s)  # type: ignore[attr-defined]  # a Ray actor method's .remote is not typed


class OrchestratorExists(RuntimeError):
    """Another rlix run's orchestrator holds the name in this Ray cluster."""


class Client:
    """Blocking calls on the orchestrator, for drivers and scripts (`rlix.init()` returns one)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._get(getattr(self.handle, method).remote(*args, **kwargs))

    @staticmethod
    def _get(ref: Any) -> Any:
        try:
            return ray.get(ref)
        except RayTaskError as exc:
            if isinstance(exc.cause, CALLER_ERRORS):
                raise exc.cause from None
            raise

    def _wait_for_grant(self, method: str, pipeline_id: str, cluster: str, *args: Any) -> Any:
        ref = getattr(self.handle, method).remote(pipeline_id, *args)
        try:
            return self._get(ref)
        except KeyboardInterrupt:
            # Only the wait was interrupted: left queued, the request would be granted to a
            # caller no longer waiting (its GPUs held from everyone) and a retry refused.
            self._call("abandon_request", pipeline_id, cluster)
            raise

    def allocate_pipeline_id(self, prefix: str = "pipeline") -> str:
        return str(self._call("allocate_pipeline_id", prefix))

    def register_pipeline(self, spec: PipelineSpec | dict[str, Any], handler: Any = None,
                          handler_timeout_s: float | None = DEFAULT_HANDLER_TIMEOUT_S) -> str:
        """`spec`: a PipelineSpec, or its dict form (`rlix.runs.codec.spec_to_dict`, as a
        scenario file writes it), which the orchestrator reads and checks. `handler_timeout_s`:
        a handler's expand or shrink that takes longer has the pipeline killed, handler and
        all (None: wait for ever)."""
        as_dict = spec if isinstance(spec, dict) else spec_to_dict(spec)
        return str(self._call("register_pipeline", as_dict, handler, handler_timeout_s))

    def admit_pipeline(self, pipeline_id: str) -> None:
        self._call("admit_pipeline", pipeline_id)

    def request(self, pipeline_id: str, cluster: str, priority: int, estimate: float | None = None) -> Any:
        """Blocks until the grant is applied; interrupted (Ctrl-C), the request is taken back."""
        return self._wait_for_grant("request", pipeline_id, cluster, cluster, priority, estimate)

    def release(self, pipeline_id: str, cluster: str) -> None:
        self._call("release", pipeline_id, cluster)

    def release_and_request(self, pipeline_id: str, released: str, cluster: str, priority: int,
                            estimate: float | None = None) -> Any:
        return self._wait_for_grant("release_and_request", pipeline_id, cluster, released, cluster, priority, estimate)

    def withdraw(self, pipeline_id: str, cluster: str) -> None:
        self._call("withdraw", pipeline_id, cluster)

    def progress(self, pipeline_id: str, remaining: float | dict[str, float]) -> None:
        self._call("progress", pipeline_id, remaining)

    def train_step_finished(self, pipeline_id: str, version: int, adapter: str | None = None) -> None:
        self._call("train_step_finished", pipeline_id, version, adapter)

    def active_ranks(self, pipeline_id: str) -> dict[int, tuple[int, ...]]:
        return dict(self._call("active_ranks", pipeline_id))

    def remove_pipeline(self, pipeline_id: str) -> None:
        self._call("remove_pipeline", pipeline_id)

    def kill_pipeline(self, pipeline_id: str) -> dict[str, Any]:
        return dict(self._call("kill_pipeline", pipeline_id))

    def launch(self, setup: PipelineSetup) -> str:
        return str(self._call("launch", setup))

    def wait_done(self, timeout_s: float | None = None) -> dict[str, Any]:
        return dict(self._call("wait_done", timeout_s))

    def snapshot(self) -> dict[str, Any]:
        return dict(self._call("snapshot"))

    def write_run(self, out: str | os.PathLike[str], *, overwrite: bool = False, plots: bool = True) -> Path:
        """Write the run's folder, the one `rlix-exec run` writes (events, tables, summary,
        plots), which `rlix-sim check`, `replay` and `jobs` read. Call it when done driving:
        the folder holds the record up to this moment, holdings still open end now in it. The
        orchestrator's own record goes on (only the driver's copy is closed), so a later call
        writes the longer run, with those holdings ending where they really did. Returns the
        folder."""
        from rlix.runs.folder import write_run

        recorder, now, api, running = self._call("record_so_far")
        recorder.finish(now)
        state: dict[str, Any] = {"finished": not running}
        if running:
            state["stop_reason"] = f"written with {', '.join(sorted(running))} still running"
        # The steps of API pipelines consumed trajectories rlix never saw: summary.json names
        # those pipelines, and `rlix-sim check` asks for none of theirs.
        return write_run(recorder, Path(out), scenario_yaml="", overwrite=overwrite, plots=plots, run_state=state,
                         extra_summary={"api_pipelines": sorted(api)})


def init(num_gpus: int | None = None, address: str | None = None, topology: Topology | None = None,
         policy: str = "rlix", config: PolicyConfig | None = None, num_cpus: int | None = None) -> Client:
    """Reach the orchestrator, starting Ray and the orchestrator when there is none.

    Locally Ray starts with `num_gpus` declared GPUs (default: the topology's, or 1 node of
    `num_gpus`); with `address` the driver joins that cluster and uses its orchestrator if one
    is running, else starts one for `topology`.
    """
    if topology is None and num_gpus is None and address is None:
        raise ValueError("give num_gpus or a topology (or the address of a running cluster)")
    total = topology.num_gpus if topology is not None else num_gpus
    joined = ray.is_initialized()
    session.start(num_gpus=total or 0, num_cpus=num_cpus, address=address)
    try:
        return Client(ray.get_actor(ORCHESTRATOR_NAME, namespace=session.NAMESPACE))
    except ValueError:
        pass
    if topology is None:
        if num_gpus is None:
            raise ValueError(f"no orchestrator runs at {address}; give a topology to start one")
        topology = Topology(1, num_gpus)
    try:
        return Client(start_orchestrator(topology, policy, config))
    except PlacementError as exc:
        if not joined:
            raise
        # The session was there before: its GPUs are the ones Ray was started with, not num_gpus.
        raise PlacementError(f"{exc} (Ray was already started in this process, without these GPUs: call "
                             f"rlix.init before ray.init, or start Ray with ray.init(num_gpus={topology.num_gpus}))"
                             ) from None


def ml_pipeline(pipeline_id: str, rollout_gpus: tuple[int, ...], train_gpus: tuple[int, ...], *,
                steps: int = 3, adapters: tuple[str, ...] = (), max_staleness: int = 0,
                num_prompts: int = 4, samples_per_prompt: int = 4, model: str = "tiny",
                task: str = "say_letter", reward: str | None = None, tp: int = 1,
                **params: Any) -> PipelineSetup:
    """A GRPO pipeline on the shared program with real models: full finetune, or multi-LoRA
    when `adapters` are given. `task` and `reward` are registry names (`@register_task`,
    `@register_reward`), looked up here, in the caller's process, where the decorators ran.
    `params` override the ML workload's defaults (actor_lr, lora_lr, max_new_tokens, ...)."""
    from rlix.executor.ml.registry import get_reward, get_task
    from rlix.executor.ml.tiny_model import prepare_model
    from rlix.executor.ml_workload import MlWorkload
    from rlix.executor.run import cache_dir
    from rlix.pipelines import AdapterConfig, ProgramConfig
    from rlix.policy import ClusterSpec, PipelineKind

    kind = PipelineKind.MULTI_LORA if adapters else PipelineKind.FULL_FINETUNE
    names = adapters or ("base",)
    spec = PipelineSpec(pipeline_id, kind, {"actor_infer": ClusterSpec(tp, rollout_gpus),
                                            "actor_train": ClusterSpec(1, train_gpus)},
                        adapters=tuple(adapters), max_staleness=max_staleness)
    program = ProgramConfig(pipeline_id, kind, tuple(AdapterConfig(a, steps, max_staleness) for a in names),
                            num_prompts=num_prompts, samples_per_prompt=samples_per_prompt)
    task_object = get_task(task)
    workload_params = {"model_path": str(prepare_model(model, cache_dir())), "task": task, "reward": reward,
                       "task_object": task_object, "reward_fn": get_reward(reward or task_object.default_reward),
                       **params}
    return PipelineSetup(spec, program, MlWorkload, workload_params)


class RankHandler:
    """A base for the handler actor of an API pipeline: keeps the set of active ranks.

    Subclass it, override `on_expand` / `on_shrink` to load and drop your engine's weights
    (raise to report the decision failed: the core undoes it and retries a shrink after a
    back-off; `MAX_FAILED_SHRINKS` failed in a row take the pipeline down), wrap it with
    `ray.remote`, and pass the handle to
    `register_pipeline`.
    """

    def __init__(self) -> None:
        self.active: dict[int, tuple[int, ...]] = {}

    async def expand(self, dp_rank: int, gpus: tuple[int, ...]) -> None:
        await self.on_expand(dp_rank, tuple(gpus))
        self.active[dp_rank] = tuple(gpus)

    async def shrink(self, dp_rank: int, gpus: tuple[int, ...], reason: str, drain_s: float = 0.0) -> None:
        self.active.pop(dp_rank, None)
        if drain_s > 0:
            await self.on_drain(dp_rank, drain_s)
        await self.on_shrink(dp_rank, tuple(gpus), reason)

    async def revoke(self, cluster: str, dp_rank: int, gpus: tuple[int, ...]) -> None:
        self.active.pop(dp_rank, None)

    async def on_expand(self, dp_rank: int, gpus: tuple[int, ...]) -> None:
        """Load weights onto the rank's GPUs."""

    async def on_drain(self, dp_rank: int, drain_s: float) -> None:
        """Before a shrink that drains: stop giving the rank new requests and return when it
        runs none, or after `drain_s` at most (the default returns at once: no drain)."""

    async def on_shrink(self, dp_rank: int, gpus: tuple[int, ...], reason: str) -> None:
        """Stop generating on the rank and drop its weights."""

    def active_ranks(self) -> dict[int, tuple[int, ...]]:
        return dict(self.active)
