"""Ray handles for the executor's actor classes, ending actors for sure, and saying in one line
why one failed.

`kill_and_confirm` is how the executor frees GPUs honestly: an actor is killed, then called
until Ray says it is dead, and only then does the core hear that its GPUs are free.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterable
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from rlix.executor.workers import RolloutWorker, TrainerWorker

RemoteRolloutWorker = ray.remote(RolloutWorker)
RemoteTrainerWorker = ray.remote(TrainerWorker)

#: Errors that mean "that actor is gone" (died, killed, its node lost).
ACTOR_GONE = (RayActorError,)

_TERMINAL_CODES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def failure_reason(error: BaseException) -> str:
    """`Type: message` of what failed, on one line: a Ray error's text can hold the remote
    traceback (in colour), whose last line is the error itself."""
    lines = [line.strip() for line in _TERMINAL_CODES.sub("", str(error)).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[-1] if lines else ''}".rstrip(": ")


async def kill_and_confirm(handles: Iterable[Any], timeout_s: float = 30.0) -> list[Any]:
    """Kill every actor of `handles` and wait until each is reported dead; returns those not
    confirmed dead within `timeout_s` (e.g. on a node that stopped answering)."""
    handles = list(handles)
    for handle in handles:
        try:
            ray.kill(handle, no_restart=True)
        except (ValueError, RayActorError):
            pass
    deadline = time.monotonic() + timeout_s
    pending = handles
    while pending and time.monotonic() < deadline:
        still = []
        for handle in pending:
            try:
                await asyncio.wait_for(handle.__ray_ready__.remote(), timeout=1.0)
                still.append(handle)
            except ACTOR_GONE:
                pass
            except (TimeoutError, GetTimeoutError):
                still.append(handle)
        pending = still
        if pending:
            await asyncio.sleep(0.05)
    return pending
