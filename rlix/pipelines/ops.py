"""The ops a pipeline program yields: the whole vocabulary between a program and its driver.

Ops that talk to the policy core (Request, Release, Publish) are turned into core events by
the shared host (`rlix.runs.host`); ops that do work (Stage, Generate, Prefetch, Checkpoint,
the weight sync before Publish) are carried out by the driver: a cost-model delay in the
simulator, real work in the executor. Waiting ops (AwaitAllowed, AwaitBatch, AwaitAnyBatch,
AwaitPlaced, a non-rollout Request) resume the program when the fact they wait for has
happened.

The rollout cluster (`actor_infer`) is never requested by a program: the host asks for it when
a batch is submitted and nothing is rolling, and gives it back when every submitted batch is
done, so a pipeline holds rollout GPUs exactly while it has rollout work.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Request:
    """Ask for a non-rollout cluster at a stage priority; resumes once the grant is applied."""

    cluster: str
    priority: int


@dataclass(frozen=True, slots=True)
class Release:
    """Give a cluster back. A Release directly followed by a Request is sent to the core as one
    atomic release-then-request, so nobody slips in between."""

    cluster: str


@dataclass(frozen=True, slots=True)
class Stage:
    """Run stage `stage` (init, values, old_log_probs, ref_log_probs, critic_train, actor_train)
    on the held `cluster` for the batch of (`adapter`, `step`); resumes with the stage's result."""

    stage: str
    cluster: str
    adapter: str
    step: int


@dataclass(frozen=True, slots=True)
class Generate:
    """Submit the rollout batch of (`adapter`, `step`): prompts x samples trajectories. Returns
    at once; rollout ranks come and go under the policy while the batch is generated."""

    adapter: str
    step: int
    num_prompts: int
    samples_per_prompt: int


@dataclass(frozen=True, slots=True)
class AwaitBatch:
    """Resume when every trajectory of (`adapter`, `step`) is complete; returns the batch."""

    adapter: str
    step: int


@dataclass(frozen=True, slots=True)
class AwaitAnyBatch:
    """Resume when the first of several batches is complete (the earliest listed wins a tie);
    returns its (adapter, step) key."""

    keys: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class AwaitAllowed:
    """Staleness pacing: resume once the core allows rollout for `step` of `adapter`."""

    adapter: str
    step: int


@dataclass(frozen=True, slots=True)
class Publish:
    """Weights of `version` exist for `adapter`: the driver syncs them to the active rollout
    ranks that need them, then the core is told (TrainStepFinished)."""

    adapter: str
    version: int


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Save what continuing from weight `version` of `adapter` needs (the trainers' weights and
    optimizer state, the step reached) before it is published; driver work on host copies, no
    GPUs: real files in the executor, a storage-bandwidth delay in the simulator."""

    adapter: str
    version: int


@dataclass(frozen=True, slots=True)
class AwaitPlaced:
    """Resume once the pipeline's home is placed (at once for a home given as GPUs): the node
    whose host memory a Prefetch reads into is known from then."""


@dataclass(frozen=True, slots=True)
class Prefetch:
    """Read the initial weights of `cluster` (from the model, or the checkpoint resumed from)
    into host memory on its home's node before asking for its GPUs, so that the init holds
    them only to copy the weights in and set up: driver work holding no GPU (the trainer
    process starts and loads on the host in the executor, a storage-bandwidth delay in the
    simulator)."""

    cluster: str


@dataclass(frozen=True, slots=True)
class Fork:
    """Start `program` as a concurrent thread of the same pipeline (e.g. a rollout producer)."""

    program: Program


Op = (Request | Release | Stage | Generate | AwaitBatch | AwaitAnyBatch | AwaitAllowed | Checkpoint | Publish
      | AwaitPlaced | Prefetch | Fork)
#: The ops a driver carries out itself (the host answers WORK for them).
Work = Stage | Generate | Checkpoint | Publish | Prefetch
#: A pipeline program: yields ops, receives each op's result.
Program = Generator[Op, Any, None]
