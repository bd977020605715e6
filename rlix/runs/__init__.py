"""rlix.runs: what both drivers share above the core.

`Loop` (the one path between a driver and `rlix.policy.Scheduler`), `Host` (one pipeline's
program ops turned into core events), `Recorder` (events, decisions and tables of a run),
the run folder, metrics, plots and replay.
"""

import importlib
from typing import Any

from rlix.runs.host import FORK, RETRY, STAGE_COLUMNS, VALUE, WAIT, WORK, Futures, Host
from rlix.runs.loop import Actuator, Loop
from rlix.runs.recorder import Recorder

__all__ = ["FORK", "RETRY", "STAGE_COLUMNS", "VALUE", "WAIT", "WORK", "Actuator", "Futures", "Host",
           "Loop", "Recorder", "ReplayResult", "Run", "RunError", "TableMismatch", "check", "load", "replay",
           "summary", "write_run"]

#: The run folder's side (pandas, numpy; matplotlib when plotting) loads on first use, so a
#: worker that only needs the loop stays light.
_LAZY = {
    "write_run": "rlix.runs.folder", "summary": "rlix.runs.metrics", "load": "rlix.runs.reader",
    "Run": "rlix.runs.reader", "replay": "rlix.runs.verify", "check": "rlix.runs.verify",
    "ReplayResult": "rlix.runs.verify", "RunError": "rlix.runs.errors", "TableMismatch": "rlix.runs.crosscheck",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rlix.runs' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
