"""Running a scenario on the executor, start to run folder (what `rlix-exec run` does).

Everything that can be wrong with the input is checked before any actor starts: the scenario
(its loader's field-named errors), the model (`prepare_model`: "tiny" is built, a folder must
load), the task and reward names (the ML registry), the backend, and that every training
cluster lies on one node. What happens then, from Ray's start to the
run folder, is `rlix.executor.live`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlix.executor.workload import PipelineSetup
from rlix.policy.specs import ROLLOUT_CLUSTER, PipelineSpec, Topology


class ExecutorInputError(ValueError):
    """A scenario the executor cannot run (one line, naming what is wrong)."""


@dataclass
class Plan:
    """A scenario checked and resolved for the executor, before anything starts."""

    scenario: Any
    topology: Topology
    setups: list[PipelineSetup]
    arrivals: dict[str, float]
    kills: list[tuple[float, str]] = field(default_factory=list)

    @property
    def specs(self) -> dict[str, PipelineSpec]:
        return {s.pipeline_id: s.spec for s in self.setups}


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rlix"


def plan(scenario_ref: str | Any, policy: str | None = None, workload: str = "ml",
         workload_params: dict[str, Any] | None = None) -> Plan:
    """Load and check a scenario for the executor (raises ExecutorInputError or ScenarioError)."""
    from rlix.scenarios import load_scenario
    from rlix.scenarios.programs import program_config
    from rlix.scenarios.sections import ExecutorConfig

    scenario = load_scenario(scenario_ref) if isinstance(scenario_ref, str | Path) else scenario_ref
    if policy is not None:
        scenario = scenario.with_policy(policy)
    if scenario.max_time_s is not None:  # else the live run goes on past it and its replay stops there
        raise ExecutorInputError(f"max_time_s: {scenario.max_time_s:g} s cuts a simulated run; a live run goes "
                                 "to its pipelines' ends (remove it, or stop the run with Ctrl-C or a kill)")
    scenario = _as_executed(scenario)
    ex = scenario.executor or ExecutorConfig()
    topology = scenario.topology()
    specs = scenario.pipeline_specs()
    for spec in specs.values():
        if not spec.placed and spec.home_size > topology.gpus_per_node:
            raise ExecutorInputError(f"pipeline {spec.pipeline_id}: a home of {spec.home_size} GPUs spans nodes; "
                                     "the executor trains each cluster in one process on one node")
        for name, cluster in spec.clusters.items():
            nodes = {topology.node_of(g) for g in cluster.mapping}
            if name != ROLLOUT_CLUSTER and len(nodes) > 1:
                raise ExecutorInputError(f"pipeline {spec.pipeline_id}: cluster {name} spans nodes {sorted(nodes)}; "
                                         "the executor trains each cluster in one process on one node")
    params = dict(workload_params or {})
    if workload == "ml":
        workload_class: Any = _ml_params(ex, params)
    elif workload == "synthetic":
        from rlix.executor.synthetic import SyntheticWorkload

        workload_class = SyntheticWorkload
    else:
        raise ExecutorInputError(f"unknown workload {workload!r} (ml or synthetic)")
    setups = []
    for pipeline in scenario.pipelines:
        pipeline_params = {**params, "algorithm": pipeline.algorithm, "kl": pipeline.kl, "seed": scenario.seed}
        setups.append(PipelineSetup(specs[pipeline.id], program_config(pipeline, ex.checkpoint_every), workload_class,
                                    pipeline_params, max_batch_per_rank=scenario.engine.max_batch,
                                    balance=scenario.engine.balance, progress_every=scenario.engine.progress_every))
    kills, unsupported = [], []
    for fault in scenario.faults.events:
        if fault.kill is not None:
            kills.append((fault.at_s, fault.kill))
        else:
            unsupported.append(f"lose_gpu at {fault.at_s} s")
    if unsupported or scenario.faults.decision_failure_rate:
        raise ExecutorInputError("faults: the executor kills pipelines; it does not inject "
                                 f"{', '.join(unsupported) or 'decision failures'} (run it in the simulator)")
    return Plan(scenario, topology, setups, {p.id: p.arrival_s for p in scenario.pipelines}, sorted(kills))


def _as_executed(scenario: Any) -> Any:
    """The scenario as the executor runs it, which its run folder records: a rank's call runs
    its trajectories to their end, so nothing migrates when a rank joins (the `engine:`
    default, `migrate_on_expand: true`, is written as false; asked for, it is refused)."""
    engine = scenario.engine
    if not engine.migrate_on_expand:
        return scenario
    if "migrate_on_expand" in engine.model_fields_set:
        raise ExecutorInputError("engine.migrate_on_expand: the executor does not move running sequences to a rank "
                                 "that joins (a rank's call runs to its end); set it false or leave it out")
    return scenario.model_copy(update={"engine": engine.model_copy(update={"migrate_on_expand": False})})


def _ml_params(ex: Any, params: dict[str, Any]) -> Any:
    """Check the model, task and reward of the `executor:` section; fill `params`."""
    from rlix.executor.ml.registry import UnknownNameError, get_reward, get_task
    from rlix.executor.ml.tiny_model import ModelSpecError, prepare_model
    from rlix.executor.ml_workload import MlWorkload

    if ex.backend == "vllm":
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            raise ExecutorInputError("executor.backend: vllm is not installed (pip install 'rlix[gpu]' on a GPU machine)")
    try:
        model_path = prepare_model(ex.model, cache_dir())
    except ModelSpecError as exc:
        raise ExecutorInputError(f"executor.model: {exc}") from None
    task_name = ex.task or "say_letter"
    try:
        task = get_task(task_name)
        reward_fn = get_reward(ex.reward or task.default_reward)
    except UnknownNameError as exc:
        raise ExecutorInputError(f"executor: {exc}") from None
    params.update({
        "model_path": str(model_path), "backend": ex.backend, "actor_lr": ex.actor_lr, "critic_lr": ex.critic_lr,
        "lora_lr": ex.lora_lr, "lora_rank": ex.lora_rank, "lora_alpha": ex.lora_alpha, "kl_coef": ex.kl_coef,
        "clip_ratio": ex.clip_ratio, "max_new_tokens": ex.max_new_tokens, "temperature": ex.temperature,
        "task": task_name, "reward": ex.reward, "task_object": task, "reward_fn": reward_fn,
    })
    return MlWorkload


def describe(the_plan: Plan, out: str | Path | None) -> str:
    """What is about to run, in one line: which pipelines on how many GPUs, under which policy,
    and the model trained (a scenario's model sizes, 7b and the like, are the simulator's cost
    classes; the executor trains the model its `executor:` section names)."""
    from rlix.scenarios.sections import ExecutorConfig

    scenario = the_plan.scenario
    topology = the_plan.topology
    executor = scenario.executor or ExecutorConfig()
    model = executor.model
    what = "a small Qwen2-style model built here" if model == "tiny" else "from that directory"
    ids = ", ".join(s.pipeline_id for s in the_plan.setups)
    # A resumed run whose pipelines all ended before the cut has none left to run.
    pipelines = f"{len(the_plan.setups)} pipelines ({ids})" if ids else "no pipeline left to run"
    return (f"{scenario.name}: {pipelines} on {topology.num_gpus} "
            f"GPUs under {scenario.policy.name}; model {model!r} ({what}; the scenario's sizes, "
            f"{'/'.join(sorted({p.model for p in scenario.pipelines}))}, set only the simulator's costs), "
            f"{executor.backend} rollouts" + (f"; run folder {out}" if out is not None else ""))
