"""Registries of tasks and reward functions, so custom pipelines plug in without editing rlix.

A task makes prompts; a reward scores one response to one prompt. Both are registered by name
with a decorator, and a scenario's `executor:` section names them:

    @register_reward("my_reward")
    def my_reward(prompt: Prompt, response: str) -> float: ...

    @register_task("my_task")
    class MyTask: ...   # anything with `sample_prompts(num_prompts, rng) -> list[Prompt]`

Importing the module that holds the decorators is what registers them (the bundled toy task
lives in `rlix.executor.ml.toy_tasks`, imported by `get_task` / `get_reward`). Standard library
only, so the orchestrator can validate names without importing torch.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar


@dataclass(frozen=True)
class Prompt:
    """One prompt: its text, and whatever the reward needs to score a response (the answer...)."""

    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


class Task(Protocol):
    """Makes prompts; `default_reward` names the reward used when the scenario names none."""

    default_reward: str

    def sample_prompts(self, num_prompts: int, rng: random.Random) -> list[Prompt]: ...


RewardFn = Callable[[Prompt, str], float]
TaskFactory = Callable[[], Task]

# Modules imported before any lookup, so the bundled names are always known.
BUILTIN_MODULES = ("rlix.executor.ml.toy_tasks",)

_TASKS: dict[str, TaskFactory] = {}
_REWARDS: dict[str, RewardFn] = {}

F = TypeVar("F")


class UnknownNameError(KeyError):
    """A task or reward name nobody registered; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


def register_task(name: str) -> Callable[[F], F]:
    """Class or zero-argument factory decorator registering a task under `name`."""
    return _registrar(_TASKS, "task", name)


def register_reward(name: str) -> Callable[[F], F]:
    """Function decorator registering `fn(prompt, response_text) -> float` under `name`."""
    return _registrar(_REWARDS, "reward", name)


def get_task(name: str) -> Task:
    """A new instance of the task registered under `name`."""
    factory: TaskFactory = _lookup(_TASKS, "task", name)
    return factory()


def get_reward(name: str) -> RewardFn:
    """The reward function registered under `name`."""
    reward: RewardFn = _lookup(_REWARDS, "reward", name)
    return reward


def known_tasks() -> list[str]:
    _import_builtins()
    return sorted(_TASKS)


def known_rewards() -> list[str]:
    _import_builtins()
    return sorted(_REWARDS)


def _registrar(table: dict[str, Any], kind: str, name: str) -> Callable[[F], F]:
    if not name:
        raise ValueError(f"register_{kind}: empty name")

    def decorate(obj: F) -> F:
        existing = table.get(name)
        # Re-registering the same object (a module imported twice) is harmless; a different
        # object under the same name would silently change what a scenario runs.
        if existing is not None and _qualname(existing) != _qualname(obj):
            raise ValueError(f"{kind} {name!r} is already registered by {_qualname(existing)}")
        table[name] = obj
        return obj

    return decorate


def _lookup(table: Mapping[str, Any], kind: str, name: str) -> Any:
    _import_builtins()
    if name not in table:
        known = ", ".join(sorted(table)) or "none"
        raise UnknownNameError(f"unknown {kind} {name!r}; known {kind}s: {known}")
    return table[name]


def _import_builtins() -> None:
    for module in BUILTIN_MODULES:
        importlib.import_module(module)


def _qualname(obj: object) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
