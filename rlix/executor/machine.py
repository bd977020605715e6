"""How much CPU other work wanted during a live run (`summary.json` `machine`).

On a shared machine other work takes cores from a run, and every duration the run measures
stretches with it; a simulator calibrated on one run predicts another only if it knows how
busy the machine was in each. Busy cores cannot tell it once the machine is saturated (it is
then always "2 of 2 busy"), so the meter counts *demand*: at each of the driver's polls, the
processes ready to run, each weighted as the kernel's scheduler weighs it (a niced process
gets 1/1.25 of the CPU per nice level), the run's own (the driver and everything it started:
Ray and its workers) apart from the others. At the end:

    {"cores": 2, "wall_s": 95.1, "own_demand": 0.3, "own_demand_running": 1.2,
     "background_demand": 1.4, "samples": 190}

own_demand_running is the run's demand at the moments any of its processes was ready to run:
a live run is mostly waiting (actor calls, sleeps), and what matters is how fast it goes when
it does run. Under fair sharing such a burst, d_run processes wanting CPU beside others
wanting d_bg, goes max(1, (d_run + d_bg) / cores) times slower than alone on an idle machine
(rlix.sim.calibrate.costs_for_background). `probe_background` measures d_bg for a few
seconds before a run, which is how a prediction learns the load it will run under. Linux
only: elsewhere the meter says nothing ({}).
"""

from __future__ import annotations

import os
import time
from typing import Any

#: CFS weighs nice level n as 1.25**-n of nice 0 (sched_prio_to_weight).
NICE_STEP = 1.25


def _weight(nice: int) -> float:
    return float(NICE_STEP ** (-nice))


def runnable_demand(own: set[int]) -> tuple[float, float] | None:
    """(own, other) weighted count of processes ready to run now (state R in /proc/PID/stat);
    the caller itself is left out (it is sampling). None off Linux."""
    me = os.getpid()
    mine = other = 0.0
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue  # it ended meanwhile
        # The command name (in parentheses) may hold spaces: the fields follow its last ')'.
        fields = stat[stat.rfind(b")") + 2:].split()
        if fields[0] != b"R":
            continue
        weight = _weight(int(fields[16]))  # field 19 of the file: nice
        if int(name) in own:
            mine += weight
        else:
            other += weight
    return mine, other


def probe_background(seconds: float = 3.0, every_s: float = 0.05) -> float | None:
    """Other work's CPU demand (weighted runnable processes) over the next `seconds`, or None."""
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        demand = runnable_demand(set())
        if demand is None:
            return None
        samples.append(demand[1])
        time.sleep(every_s)
    return sum(samples) / len(samples) if samples else None


class MachineMeter:
    """Samples the demand of the run and of the rest at each poll (see the module docstring)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.own: list[float] = []
        self.other: list[float] = []

    def sample(self) -> None:
        import psutil

        try:
            me = psutil.Process()
            pids = {me.pid, *(p.pid for p in me.children(recursive=True))}
        except psutil.Error:
            return
        demand = runnable_demand(pids)
        if demand is not None:
            self.own.append(demand[0])
            self.other.append(demand[1])

    def result(self) -> dict[str, Any]:
        if not self.own:
            return {}
        running = [d for d in self.own if d > 0]
        return {"cores": os.cpu_count(), "wall_s": time.monotonic() - self.t0,
                "own_demand": sum(self.own) / len(self.own),
                "own_demand_running": sum(running) / len(running) if running else 0.0,
                "background_demand": sum(self.other) / len(self.other), "samples": len(self.own)}
