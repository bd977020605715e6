"""Where jobs' time goes: a run's jobs grouped, each group's wait to start, its time above alone
and the training waits inside it (`rlix-sim jobs RUN_DIR`).

A pipeline is a job (rlix.runs.jobs). Jobs are grouped by

- `name` (default): the id less a trailing `-<n>`, so the jobs a stream draws from one template
  (`grpo7b-math-0`, `grpo7b-math-1`, ...) form one group; other ids are their own group;
- `pipeline`: one group per job;
- `arrival`: the hour (or `bin_s`) in which the job arrived: bursts of arrivals show up here.

Per group (means over its jobs unless said): `jobs`, `finished`, `alone_s`, `queueing_s`,
`run_s` (finish - start), `jct_s`, `excess_s` (jct - alone: what sharing costs the job, waiting
included), `excess_share` (the group's share of the time jobs lost to sharing: each finished
job's excess counted where positive, so the shares sum to 100% and a group of jobs faster than
alone holds none; null when no job lost time. Signed excesses would not do: where some jobs
gain and others lose, their sum can be near zero and each group's share of it any size),
`slowdown`, and `train_wait_s`: the summed waits of the job's training requests
(t_grant - t_request in `waits` of every stage but init and rollout), what the job spent
waiting for training GPUs once started (a job alone waits too, for its own rollout ranks to
offload); `rollout_wait_s`: the seconds the job had rollout work left (its latest progress
report) and held no rollout rank (rlix.runs.rankless), what its rollout waited for GPUs (a
job alone waits so only while its own training holds its ranks' GPUs). The two waits may
overlap in time (an off-policy job's next rollout waits while its training does). The stage
table splits the waits by stage; its `init` column is the wait from a job's first request (its
init) to the grant: the queueing column less the job's `prefetch_s` (a job that reads its
weights into host memory first asks for its init's GPUs only then). After the groups, each
table has a row over every job, `all` (`all jobs` when a group is itself named `all`, so the
two never mix).
Figures a run does not have (alone times of an executor run, the finish of a job still
running) are null and left out of the means.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from rlix.policy.specs import Priority

GROUPINGS = ("name", "pipeline", "arrival")
#: The group label of the row over every job, after the groups' rows ...
OVERALL = "all"
#: ... and its label when a group is itself named OVERALL (a space: no job id or arrival span has one).
OVERALL_IF_TAKEN = "all jobs"
BREAKDOWN_COLUMNS = ("group", "jobs", "finished", "alone_s", "queueing_s", "run_s", "jct_s", "excess_s",
                     "excess_share", "slowdown", "train_wait_s", "rollout_wait_s")
_NUMBERED = re.compile(r"^(.*)-\d+$")


def group_of(pipeline_id: str) -> str:
    """The `name` group of a job: its id less a trailing `-<n>` (the whole id if none)."""
    match = _NUMBERED.match(pipeline_id)
    return match.group(1) if match and match.group(1) else pipeline_id


def job_groups(jobs: pd.DataFrame, by: str, bin_s: float) -> pd.Series:
    """Each job's group under `by` (GROUPINGS), indexed like `jobs`."""
    if by == "name":
        return jobs["pipeline_id"].map(group_of)
    if by == "pipeline":
        return jobs["pipeline_id"].astype(str)
    if by == "arrival":
        start = np.floor(jobs["arrival_s"].to_numpy(float) / bin_s) * bin_s
        return pd.Series([_span(s, bin_s) for s in start], index=jobs.index)
    raise ValueError(f"unknown grouping {by!r} (one of {', '.join(GROUPINGS)})")


def _span(start_s: float, bin_s: float) -> str:
    unit, size = ("h", 3600.0) if bin_s % 3600 == 0 else ("min", 60.0) if bin_s % 60 == 0 else ("s", 1.0)
    # 12 significant digits: :g's six merged bins past 10^6 (1.23457e+06-1.23457e+06 s twice)
    return f"{start_s / size:.12g}-{(start_s + bin_s) / size:.12g} {unit}"


def granted_requests(waits: pd.DataFrame) -> pd.DataFrame:
    """The granted non-rollout requests of `waits` (init's included)."""
    return waits[waits["t_grant"].notna() & (waits["priority"] != int(Priority.ROLLOUT))]


def group_order(jobs: pd.DataFrame, group: pd.Series) -> list[str]:
    """The groups of `group` (one per job, indexed like `jobs`) in order of first arrival."""
    return [str(name) for name in group.loc[jobs.sort_values("arrival_s", kind="stable").index].drop_duplicates()]


def overall_label(keys: list[str]) -> str:
    """The label of the row over every job: OVERALL, or OVERALL_IF_TAKEN when a group is itself
    named OVERALL (a job with id "all"), so the two rows never share a label."""
    return OVERALL_IF_TAKEN if OVERALL in keys else OVERALL


def group_means(per_job: pd.DataFrame, jobs: pd.DataFrame, group: pd.Series) -> pd.DataFrame:
    """Means of `per_job` (a row per job, indexed like `jobs`) per group of `group` (likewise),
    groups in order of first arrival, then the row over every job (`overall_label`); a "group"
    column first. The overall row is the mean over the jobs, computed apart from the groups."""
    keys = group_order(jobs, group)
    by_group = per_job.groupby(group, sort=False).mean().reindex(keys)
    overall = per_job.mean().to_frame(overall_label(keys)).T.astype(by_group.dtypes.to_dict())
    means = pd.concat([by_group, overall])
    return means.rename_axis("group").reset_index()


def train_waits(waits: pd.DataFrame) -> pd.DataFrame:
    """Each job's summed wait per stage (columns: Priority names in lower case, seconds), from
    the granted non-rollout requests of `waits`."""
    granted = granted_requests(waits)
    waited = granted.assign(wait_s=granted["t_grant"] - granted["t_request"],
                            stage=granted["priority"].map(lambda p: Priority(int(p)).name.lower()))
    table = waited.pivot_table(index="pipeline_id", columns="stage", values="wait_s", aggfunc="sum", fill_value=0.0)
    order = [p.name.lower() for p in Priority if p.name.lower() in table.columns]
    return table[order]


def breakdown(jobs: pd.DataFrame, waits: pd.DataFrame | None, by: str = "name",
              bin_s: float = 3600.0, rollout_waits: pd.Series | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(groups, stage_waits): one row per group (BREAKDOWN_COLUMNS) in order of first arrival,
    then a row over every job (OVERALL, "all"; "all jobs" if a group is named "all"); and each group's mean per-job wait by stage. `waits`
    None (a run that did not keep the table): training waits unknown. `rollout_waits`: each
    job's rank-less seconds by pipeline id (rlix.runs.rankless.rankless_by_job), None if
    unknown (a job missing from it had none)."""
    if not bin_s > 0:
        raise ValueError(f"bin_s must be positive, got {bin_s}")
    jobs = jobs.reset_index(drop=True)
    if waits is None:
        stages = pd.DataFrame(index=jobs.index)
    else:
        stages = train_waits(waits).reindex(jobs["pipeline_id"]).fillna(0.0).set_index(jobs.index)
    frame = jobs.assign(
        group=job_groups(jobs, by, bin_s),
        run_s=(jobs["finish_s"] - jobs["start_s"]).where(jobs["jct_s"].notna()),
        excess_s=jobs["jct_s"] - jobs["alone_s"],
        lost_s=lambda f: f["excess_s"].clip(lower=0.0),  # what excess_share shares out
        train_wait_s=stages.drop(columns=["init"], errors="ignore").sum(axis=1) if waits is not None else np.nan,
        rollout_wait_s=np.nan if rollout_waits is None
        else rollout_waits.reindex(jobs["pipeline_id"]).fillna(0.0).to_numpy(),
        finished=jobs["jct_s"].notna(),  # not killed or crashed: those end with no JCT
    )
    keys = group_order(frame, frame["group"])
    total_lost = frame["lost_s"].sum(min_count=1)
    overall = overall_label(keys)
    table = pd.concat([_summary(frame, keys, total_lost), _summary(frame.assign(group=overall), [overall], total_lost)])
    return table.reset_index(drop=True), group_means(stages, frame, frame["group"])


def _summary(frame: pd.DataFrame, keys: list[str], total_lost: float) -> pd.DataFrame:
    grouped = frame.groupby("group", sort=False)
    share = grouped["lost_s"].sum(min_count=1) / total_lost if total_lost > 0 else np.nan
    table = pd.DataFrame({
        "jobs": grouped.size(),
        "finished": grouped["finished"].sum(),
        **{name: grouped[name].mean() for name in ("alone_s", "queueing_s", "run_s", "jct_s", "excess_s")},
        "excess_share": share,
        "slowdown": grouped["slowdown"].mean(),
        "train_wait_s": grouped["train_wait_s"].mean(),
        "rollout_wait_s": grouped["rollout_wait_s"].mean(),
    }).reindex(keys)
    return table.rename_axis("group").reset_index()[list(BREAKDOWN_COLUMNS)]
