"""What jobs' training requests waited for: what held each job's home meanwhile (`rlix-sim jobs`).

A training request (any stage but init and rollout) waits from its request to its grant while
GPUs of the job's home are held. At every instant of a wait, the wait is put down to one
occupant of those GPUs (from the run's `activity` table), the first of:

1. `training`: another job's training stage: a gang of a job stacked on the same home (such
   jobs take turns there, highest priority first);
2. `init`: another job's init: a job placed on the same home loads its model, at the highest
   priority;
3. `held`: another job holds the GPU for a training cluster and runs nothing on it (between
   two of its stages, or publishing; from the `allocations` table when the run kept it);
4. `offload`: a rollout rank's offload (the grant waits for its weights to leave);
5. `load`: a rollout rank's load (a rank lent just before, cut once loaded);
6. `rollout`: a rollout rank running (a drain, or a grant in the same instant);
7. `idle`: nothing on the home: the policy has not granted yet (the RLix model plans its next
   cycle only once its last cycle's moves are carried out), the driver's latency, a GPU lost.

Each job's home is the GPUs its own training stages ran on. The figures of a group are means
per job, and the causes of a job add up to its training waits (`train_wait_s` of
`rlix.runs.breakdown`) less any wait of a job that never held its home.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rlix.policy.specs import Priority
from rlix.runs.breakdown import granted_requests, group_means, job_groups

CAUSES = ("training", "init", "held", "offload", "load", "rollout", "idle")
#: activity stages that are not training stages, by their cause (a smaller code explains more)
_CODES = {"init": 1, "held": 2, "offload": 3, "load": 4, "rollout": 5}
_TRAINING = 0
_IDLE = len(CAUSES) - 1


class _GpuRows:
    """One GPU's activity rows sorted by start: starts, ends, codes, owners and the longest row,
    so the rows meeting an interval are found by bisection."""

    def __init__(self, rows: pd.DataFrame) -> None:
        rows = rows.sort_values("t_start", kind="stable")
        self.starts = rows["t_start"].to_numpy(float)
        self.ends = rows["t_end"].to_numpy(float)
        self.codes = rows["stage"].map(lambda s: _CODES.get(s, _TRAINING)).to_numpy(int)
        self.owners = rows["pipeline_id"].astype(str).to_numpy()
        self.longest_s = float((self.ends - self.starts).max()) if len(rows) else 0.0

    def meeting(self, t0: float, t1: float) -> slice:
        return slice(int(np.searchsorted(self.starts, t0 - self.longest_s)), int(np.searchsorted(self.starts, t1)))


def _one_wait(gpus: list[_GpuRows], pipeline_id: str, t0: float, t1: float) -> np.ndarray:
    """Seconds of the wait [t0, t1) put down to each cause (CAUSES order)."""
    starts, ends, codes = [], [], []
    for rows in gpus:
        part = rows.meeting(t0, t1)
        s, e, c, o = rows.starts[part], rows.ends[part], rows.codes[part], rows.owners[part]
        # the job's own training, init and holdings cannot be what it waits for
        keep = (e > t0) & (s < t1) & ~((o == pipeline_id) & (c <= _CODES["held"]))
        starts.append(s[keep])
        ends.append(e[keep])
        codes.append(c[keep])
    s, e, c = np.concatenate(starts), np.concatenate(ends), np.concatenate(codes)
    cuts = np.unique(np.concatenate([[t0, t1], np.clip(s, t0, t1), np.clip(e, t0, t1)]))
    seconds = np.zeros(len(CAUSES))
    mids = (cuts[:-1] + cuts[1:]) / 2
    covers = (s[None, :] <= mids[:, None]) & (mids[:, None] < e[None, :])
    best = np.where(covers, c[None, :], _IDLE).min(axis=1) if len(c) else np.full(len(mids), _IDLE)
    np.add.at(seconds, best, np.diff(cuts))
    return seconds


def wait_causes(jobs: pd.DataFrame, waits: pd.DataFrame, activity: pd.DataFrame, by: str = "name",
                bin_s: float = 3600.0, allocations: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per group (the groups and order of `rlix.runs.breakdown.breakdown`, then "all"): each
    job's mean training-wait seconds by cause (CAUSES). Without `allocations`, a GPU held and
    not used counts as idle."""
    jobs = jobs.reset_index(drop=True)
    stages = activity[~activity["stage"].isin(("load", "offload", "rollout"))]
    homes = {str(pid): sorted(set(rows["gpu"])) for pid, rows in
             stages[stages["stage"] != "init"].groupby("pipeline_id", observed=True)}
    rows = activity[["pipeline_id", "gpu", "stage", "t_start", "t_end"]]
    if allocations is not None:
        held = allocations[allocations["dp_rank"] < 0]  # a training cluster's hold, not a rank
        rows = pd.concat([rows.astype({"pipeline_id": str, "stage": str}),
                          held[["pipeline_id", "gpu", "t_start", "t_end"]].astype({"pipeline_id": str})
                          .assign(stage="held")], ignore_index=True)
    by_gpu = {int(gpu): _GpuRows(part) for gpu, part in rows.groupby("gpu")}
    granted = granted_requests(waits)
    granted = granted[(granted["priority"] != int(Priority.INIT)) & (granted["t_grant"] > granted["t_request"])]
    per_job = {str(pid): np.zeros(len(CAUSES)) for pid in jobs["pipeline_id"]}
    for pid, t0, t1 in zip(granted["pipeline_id"].astype(str), granted["t_request"], granted["t_grant"], strict=True):
        home = homes.get(pid)
        if home and pid in per_job:
            per_job[pid] += _one_wait([by_gpu[g] for g in home], pid, float(t0), float(t1))
    table = pd.DataFrame([per_job[str(pid)] for pid in jobs["pipeline_id"]], columns=list(CAUSES), index=jobs.index)
    return group_means(table, jobs, job_groups(jobs, by, bin_s))
