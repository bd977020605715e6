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

Demand sampled at polls misses what a run *does* with the CPU, so the meter also counts it:
`own_cpu_s`, the CPU seconds (user + system) its processes used, each process's last sample
(work a process did after the last poll before it ended is not counted), `own_cores`
(own_cpu_s / wall_s), and `machine_busy_share`, the share of the machine's CPU time that was
busy over the run, from /proc/stat, and `own_cpu_by_role_s`, that CPU by what each process was
(`role_of`: rollout workers, trainers, pipeline actors, the orchestrator, other Ray workers,
Ray's services, the driver). On the 2-core machine cpu-demo keeps the machine 96-99%
busy and the same training costs 57.7 CPU-s on 2 declared GPUs and 81.0 on 4
(docs/calibration.md): a run on declared GPUs that share a few cores is bound by its CPU
work, not by its spans.
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


def cpu_speed_s(repeats: int = 5, iterations: int = 400_000) -> float:
    """The CPU time one fixed unit of pure-Python work takes now (median of `repeats`; ~0.02 s
    each on the 2-core VM). The same instructions cost more CPU seconds when the physical core
    is shared (a hyperthread sibling, caches) or clocked down, which no busy share or steal
    counter shows: the gauge for whether two runs had the same machine."""
    samples = []
    for _ in range(repeats):
        start, total = time.process_time(), 0
        for i in range(iterations):
            total += i * i
        samples.append(time.process_time() - start)
    samples.sort()
    return samples[len(samples) // 2]


def machine_cpu_s() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of the whole machine since boot, all cores (/proc/stat's
    first line; iowait counts as idle, steal as busy: taken from this machine). None off Linux."""
    try:
        with open("/proc/stat", "rb") as handle:
            fields = [int(x) for x in handle.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    tick = os.sysconf("SC_CLK_TCK")
    busy = user + nice + system + irq + softirq + steal
    return busy / tick, (busy + idle + iowait) / tick


#: What a run's process is, by its command line (Ray titles its worker processes `ray::Class`).
ROLES = (("ray::RolloutWorker", "rollout_worker"), ("ray::TrainerWorker", "trainer"),
         ("ray::PipelineActor", "pipeline_actor"), ("ray::Orchestrator", "orchestrator"), ("ray::", "ray_worker"))


def role_of(cmdline: list[str], is_driver: bool) -> str:
    """The role of a run's process from its command line: a `ROLES` actor, another Ray worker
    (idle, agents), Ray's own services (raylet, GCS, dashboard, monitors), or the driver."""
    if is_driver:
        return "driver"
    head = cmdline[0] if cmdline else ""
    for prefix, role in ROLES:
        if head.startswith(prefix):
            return role
    return "ray_system" if "ray" in " ".join(cmdline[:3]) else "other"


#: Roles a process keeps once it has them (an actor's, the driver's): not read again. Any
#: other may still change (a Ray worker process has its plain command line until Ray titles
#: it, and an idle one becomes an actor).
SETTLED_ROLES = frozenset({"rollout_worker", "trainer", "pipeline_actor", "orchestrator", "driver"})


class MachineMeter:
    """Samples the demand of the run and of the rest at each poll, and what the run's processes
    and the machine used (see the module docstring)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.own: list[float] = []
        self.other: list[float] = []
        #: pid -> CPU seconds it had used at its last sample (processes come and go), and at
        #: the start for those already running then (only the run's share counts).
        self.own_cpu: dict[int, float] = {}
        #: pid -> what the process was at its last sample (`role`): a Ray worker process
        #: becomes an actor after it starts, and the CPU it used is the last role's.
        self.roles: dict[int, str] = {}
        self.own_cpu_start = self._own_cpu(self._processes())
        self.machine_start = machine_cpu_s()
        self.machine_last = self.machine_start

    @staticmethod
    def _processes() -> list[Any]:
        import psutil

        try:
            me = psutil.Process()
            return [me, *me.children(recursive=True)]
        except psutil.Error:
            return []

    @staticmethod
    def _own_cpu(processes: list[Any], roles: dict[int, str] | None = None) -> dict[int, float]:
        """CPU seconds each process has used; with `roles`, each one's role updated too."""
        import psutil

        me, used = os.getpid(), {}
        for process in processes:
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue  # it ended meanwhile: its last sample stands
            used[process.pid] = times.user + times.system
            if roles is not None and roles.get(process.pid) not in SETTLED_ROLES:
                try:
                    roles[process.pid] = role_of(process.cmdline(), process.pid == me)
                except psutil.Error:
                    pass  # its last role stands
        return used

    def sample(self) -> None:
        processes = self._processes()
        if not processes:
            return
        self.own_cpu.update(self._own_cpu(processes, self.roles))
        self.machine_last = machine_cpu_s()
        demand = runnable_demand({p.pid for p in processes})
        if demand is not None:
            self.own.append(demand[0])
            self.other.append(demand[1])

    def result(self) -> dict[str, Any]:
        if not self.own:
            return {}
        running = [d for d in self.own if d > 0]
        wall_s = time.monotonic() - self.t0
        start = self.own_cpu_start
        own_cpu_s = sum(used - start.get(pid, 0.0) for pid, used in self.own_cpu.items())
        out: dict[str, Any] = {"cores": os.cpu_count(), "wall_s": wall_s,
               "own_demand": sum(self.own) / len(self.own),
               "own_demand_running": sum(running) / len(running) if running else 0.0,
               "background_demand": sum(self.other) / len(self.other), "samples": len(self.own),
               "own_cpu_s": own_cpu_s, "own_cores": own_cpu_s / wall_s if wall_s > 0 else 0.0}
        by_role: dict[str, float] = {}
        for pid, used in self.own_cpu.items():
            role = self.roles.get(pid, "other")
            by_role[role] = by_role.get(role, 0.0) + used - start.get(pid, 0.0)
        out["own_cpu_by_role_s"] = dict(sorted(by_role.items()))
        first, last = self.machine_start, self.machine_last
        if first is not None and last is not None and last[1] > first[1]:
            out["machine_busy_share"] = (last[0] - first[0]) / (last[1] - first[1])
        return out
