"""The pipeline programs: one RL step of each kind, as generators of ops.

Full-finetune step s (GRPO, or PPO with a critic; reference log-probs when KL is on):

    rollout (6) -> value compute (5, critic) -> old log-probs (3) -> reference log-probs (4, KL)
    -> critic training (2, critic) -> actor training (1) -> [checkpoint, every N steps]
    -> publish weight version s + 1

A pipeline first loads each training cluster's model at priority 0 (init). Under a policy that
prefetches (rlix), it reads the weights into host memory before it asks, holding no GPU: another
job stacked on the same home then trains meanwhile, where an init that read from storage while
holding the GPUs would keep it waiting (RLix's pipelines read under their priority-0 hold).

Each stage requests its cluster at its priority and releases it after, so training GPUs are
free for rollout between stages. Rollout of later steps runs concurrently in a producer thread
paced by the core (`AwaitAllowed`): with max_staleness k, rollout for step s starts once
version s - k exists, so k = 0 is on-policy and k >= 1 overlaps rollout with training.

A pipeline resumed from a checkpoint starts each adapter at its `first_step` (the models are
loaded from the checkpoint at init, and the core already knows the versions that exist). One
resumed from a checkpoint of its last step has an empty program: it registers and ends.

Multi-LoRA: one base, several adapters, each with its own producer, steps and staleness bound.
The trainer takes whichever adapter batch is ready first (ties in adapter order) and runs old
log-probs and actor training of that adapter only, then publishes that adapter's version while
it still holds actor_train, and releases it after. An adapter's publish is a fraction of a
second: had actor_train been released before it, another adapter's batch waiting meanwhile would
ask for it again at once, and the GPUs would be lent to other jobs' rollout in between only to
be taken back before their weights had loaded. Released after the publish, a release followed
by a batch that is already done and the next request is one atomic event (`rlix.runs.host`).
"""

from __future__ import annotations

from rlix.pipelines.config import AdapterConfig, ProgramConfig
from rlix.pipelines.ops import (
    AwaitAllowed,
    AwaitAnyBatch,
    AwaitBatch,
    AwaitPlaced,
    Checkpoint,
    Fork,
    Generate,
    Prefetch,
    Program,
    Publish,
    Release,
    Request,
    Stage,
)
from rlix.policy.specs import PipelineKind, Priority


def program_for(config: ProgramConfig) -> Program:
    """The program of a pipeline of `config.kind`; an empty one for a pipeline with nothing
    left to train (it loads no model and holds no GPU: its driver keeps the checkpoint's)."""
    if config.finished:
        return nothing()
    if config.kind is PipelineKind.MULTI_LORA:
        return multi_lora(config)
    return full_finetune(config)


def nothing() -> Program:
    yield from ()


def initialize(config: ProgramConfig) -> Program:
    """Every non-rollout cluster loads its model once, at priority 0, then gives its GPUs back.
    With `prefetch_weights` every cluster's weights are read into host memory first, holding no
    GPU, so each init holds its GPUs only to copy them in and set up."""
    if config.prefetch_weights:
        yield AwaitPlaced()
        for cluster in config.init_clusters:
            yield Prefetch(cluster)
    for cluster in config.init_clusters:
        yield Request(cluster, Priority.INIT)
        yield Stage("init", cluster, "", -1)
        yield Release(cluster)


def producer(config: ProgramConfig, adapter: AdapterConfig) -> Program:
    """Submits the rollout batch of each step as soon as staleness pacing allows it."""
    for step in range(config.first_step(adapter.name), adapter.num_steps):
        yield AwaitAllowed(adapter.name, step)
        yield Generate(adapter.name, step, config.num_prompts, config.samples_per_prompt)


def stage(cluster: str, priority: int, name: str, adapter: str, step: int) -> Program:
    yield Request(cluster, priority)
    yield Stage(name, cluster, adapter, step)
    yield Release(cluster)


def full_finetune(config: ProgramConfig) -> Program:
    yield from initialize(config)
    (adapter,) = config.adapters
    name = adapter.name
    yield Fork(producer(config, adapter))
    for step in range(config.first_step(name), adapter.num_steps):
        yield AwaitBatch(name, step)
        if config.has_critic:
            yield from stage("critic", Priority.VALUE, "values", name, step)
        yield from stage("actor_train", Priority.OLD_LOG_PROBS, "old_log_probs", name, step)
        if config.has_reference:
            yield from stage("reference", Priority.REF_LOG_PROBS, "ref_log_probs", name, step)
        if config.has_critic:
            yield from stage("critic", Priority.CRITIC_TRAIN, "critic_train", name, step)
        yield from stage("actor_train", Priority.ACTOR_TRAIN, "actor_train", name, step)
        if config.checkpoints_after(step):
            yield Checkpoint(name, step + 1)
        yield Publish(name, step + 1)


def multi_lora(config: ProgramConfig) -> Program:
    yield from initialize(config)
    for adapter in config.adapters:
        yield Fork(producer(config, adapter))
    next_step = {a.name: config.first_step(a.name) for a in config.adapters}
    num_steps = {a.name: a.num_steps for a in config.adapters}
    while True:
        keys = tuple((name, step) for name, step in next_step.items() if step < num_steps[name])
        if not keys:
            return
        name, step = yield AwaitAnyBatch(keys)
        yield from stage("actor_train", Priority.OLD_LOG_PROBS, "old_log_probs", name, step)
        yield Request("actor_train", Priority.ACTOR_TRAIN)
        yield Stage("actor_train", "actor_train", name, step)
        next_step[name] = step + 1
        if config.checkpoints_after(step):
            yield Checkpoint(name, step + 1)
        yield Publish(name, step + 1)
        yield Release("actor_train")  # after the publish (see the module docstring)
