"""rlix.runs: what both drivers share above the core.

`Loop` (the one path between a driver and `rlix.policy.Scheduler`), `Host` (one pipeline's
program ops turned into core events), `Recorder` (events, decisions and tables of a run),
the run folder, metrics, plots and replay.
"""

from rlix.runs.host import FORK, RETRY, STAGE_COLUMNS, VALUE, WAIT, WORK, Futures, Host
from rlix.runs.loop import Actuator, Loop
from rlix.runs.recorder import Recorder

__all__ = ["FORK", "RETRY", "STAGE_COLUMNS", "VALUE", "WAIT", "WORK", "Actuator", "Futures", "Host",
           "Loop", "Recorder"]
