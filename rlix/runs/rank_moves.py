"""What rollout ranks' moves bought: each rank's loads and offloads against the rollout it ran
(`rlix-sim jobs`, its last table).

A rollout rank's *tenure* is one hold of its GPUs: the `allocations` rows of the rollout cluster
with one pipeline, dp_rank and start. Within it the `activity` table says how long those GPUs
loaded the rank's weights, ran its rollout and offloaded it. A tenure *paid* when its rollout
GPU-seconds were at least its load and offload GPU-seconds: a rank cut before it had run as
long as its moves took spent more of its GPUs' time moving than working (the prefixes it held
are computed again elsewhere on top). Moves are what a policy that moves often pays, so this is
where two policies' runs of one scenario differ most (`rlix-sim compare` writes both).

What took a tenure's GPUs when it ended, from the next hold on each of them: `training` (a
training or init cluster of any job started on one of them at once), else `rollout` (another
rank did), else nothing (a release; the GPUs idled, or the run ended).

Per group (the groups and order of `rlix.runs.breakdown.breakdown`, then "all"):
`rank_tenures`, `rollout_gpu_s` and `moves_gpu_s` (loads + offloads) are means per job;
`median_tenure_s` is the median length of the group's tenures, and the shares are of the
group's sums: `move_share` (moves / (moves + rollout)), `unpaid_share` (of the tenures, those
that did not pay) and `cut_by_training` (of the tenures, those a training cluster took the GPUs
of at once). A job that ran no rollout rank counts as zero tenures.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rlix.policy.specs import ROLLOUT_CLUSTER
from rlix.runs.breakdown import group_order, job_groups

RANK_MOVES_COLUMNS = ("group", "rank_tenures", "median_tenure_s", "rollout_gpu_s", "moves_gpu_s", "move_share",
                      "unpaid_share", "cut_by_training")
_TENURE = ["pipeline_id", "dp_rank", "t_start"]
_ALLOCATION_KEYS = ("pipeline_id", "cluster", "dp_rank", "gpu", "t_start", "t_end")
#: a hold starting within this of a tenure's end took its GPUs "at once": the simulator records
#: both at one instant, a live driver a loop's latency apart
_AT_ONCE_S = 0.1


def _what_took(allocations: pd.DataFrame) -> pd.Series:
    """Per rollout GPU-row of `allocations` (indexed like it): 2 if the next hold on its GPU, started
    at its end (within _AT_ONCE_S), is a training or init cluster's, 1 if a rollout rank's, 0 if
    none started then."""
    rows = allocations.sort_values(["gpu", "t_start"], kind="stable")
    same_gpu = rows["gpu"].shift(-1) == rows["gpu"]
    at_once = same_gpu & (rows["t_start"].shift(-1) - rows["t_end"] <= _AT_ONCE_S)
    by_training = rows["cluster"].shift(-1) != ROLLOUT_CLUSTER
    code = np.where(at_once, np.where(by_training, 2, 1), 0)
    return pd.Series(code, index=rows.index).reindex(allocations.index)


def tenures(allocations: pd.DataFrame, activity: pd.DataFrame) -> pd.DataFrame:
    """One row per rollout rank tenure: pipeline_id, dp_rank, t_start, t_end (its last GPU's),
    taken (2 training, 1 rollout, 0 nothing; the highest over its GPUs), rollout_gpu_s and
    moves_gpu_s."""
    # one dtype per key on both sides (an empty table's columns read back as floats)
    kinds = {"pipeline_id": str, "cluster": str, "dp_rank": "int64", "gpu": "int64", "t_start": float, "t_end": float}
    allocations = allocations.astype({k: kinds[k] for k in _ALLOCATION_KEYS}).reset_index(drop=True)
    activity = activity.astype(kinds)
    allocations = allocations.assign(taken=_what_took(allocations))
    ranks = allocations[allocations["cluster"] == ROLLOUT_CLUSTER]
    work = activity[(activity["cluster"] == ROLLOUT_CLUSTER)
                    & activity["stage"].isin(("rollout", "load", "offload"))]
    work = work.assign(gpu_s=work["t_end"] - work["t_start"], moving=work["stage"] != "rollout")
    # each activity row lies in the tenure of its rank and GPU that started last before it
    holds = ranks[["pipeline_id", "dp_rank", "gpu", "t_start"]].rename(columns={"t_start": "tenure_start"})
    placed = pd.merge_asof(work.sort_values("t_start"), holds.sort_values("tenure_start"), left_on="t_start",
                           right_on="tenure_start", by=["pipeline_id", "dp_rank", "gpu"], allow_exact_matches=True)
    placed = placed[placed["tenure_start"].notna()]
    spent = placed.groupby(["pipeline_id", "dp_rank", "tenure_start", "moving"])["gpu_s"].sum().unstack("moving")
    spent = spent.reindex(columns=[False, True], fill_value=0.0).fillna(0.0)
    spent.columns = ["rollout_gpu_s", "moves_gpu_s"]
    table = ranks.groupby(_TENURE, as_index=False).agg(t_end=("t_end", "max"), taken=("taken", "max"))
    spent = spent.rename_axis(index={"tenure_start": "t_start"}).reset_index()
    table = table.merge(spent.astype({k: kinds[k] for k in _TENURE}), on=_TENURE, how="left")
    return table.fillna({"rollout_gpu_s": 0.0, "moves_gpu_s": 0.0})


def rank_moves(jobs: pd.DataFrame, allocations: pd.DataFrame, activity: pd.DataFrame, by: str = "name",
               bin_s: float = 3600.0) -> pd.DataFrame:
    """Per group, then "all": RANK_MOVES_COLUMNS (see the module docstring)."""
    jobs = jobs.reset_index(drop=True)
    group = job_groups(jobs, by, bin_s)
    of_job = dict(zip(jobs["pipeline_id"].astype(str), group, strict=True))
    table = tenures(allocations, activity)
    table = table[table["pipeline_id"].isin(of_job)]
    table = table.assign(group=table["pipeline_id"].map(of_job),
                         unpaid=table["rollout_gpu_s"] < table["moves_gpu_s"])
    rows = [_row(key, table[table["group"] == key], int((group == key).sum())) for key in group_order(jobs, group)]
    rows.append(_row("all", table, len(jobs)))
    return pd.DataFrame(rows, columns=list(RANK_MOVES_COLUMNS))


def _row(key: str, part: pd.DataFrame, num_jobs: int) -> tuple[object, ...]:
    rollout_s, moves_s = float(part["rollout_gpu_s"].sum()), float(part["moves_gpu_s"].sum())
    num = len(part)
    unpaid = part["unpaid"]
    return (key, num / num_jobs, (part["t_end"] - part["t_start"]).median(), rollout_s / num_jobs,
            moves_s / num_jobs, moves_s / (moves_s + rollout_s) if moves_s + rollout_s > 0 else np.nan,
            unpaid.mean() if num else np.nan, (part["taken"] == 2).mean() if num else np.nan)
