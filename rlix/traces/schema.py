"""Column names and dtypes: the input-trace columns and the run-output tables of DESIGN.md.

Everything else in rlix.traces takes its column lists from here, so a renamed or added column is
changed in one place.
"""

from __future__ import annotations

from typing import Final, Literal

# Token counts above this are treated as corrupt input, not as long rollouts: the longest
# published RL caps are ~100k tokens (Seer, arXiv 2511.14617), two orders of magnitude below.
MAX_TOKENS: Final = 10_000_000

# --- Input traces (DESIGN.md, "Input traces") -------------------------------------------------

RESPONSE_TOKENS: Final = "response_tokens"
REQUIRED_COLUMNS: Final = (RESPONSE_TOKENS,)
OPTIONAL_COLUMNS: Final = (
    "prompt_tokens",
    "pipeline",
    "adapter",
    "step",
    "group",
    "num_turns",
    "tool_time_s",
)
# Written by the generators: True where the sample hit the length cap (verl's clip_ratio counts
# these; WORKLOADS.md calls it finish_reason = length).
CAPPED: Final = "capped"
# Every known input column, in the order a validated trace has them: who and when, then sizes.
INPUT_COLUMNS: Final = (
    "pipeline",
    "adapter",
    "step",
    "group",
    RESPONSE_TOKENS,
    "prompt_tokens",
    "num_turns",
    "tool_time_s",
    CAPPED,
)

ColumnKind = Literal["length", "count", "index", "integer", "seconds", "text", "flag"]

# What each known input column holds; validate.py turns a kind into checks and a dtype.
#   length:  positive integer token count, at most MAX_TOKENS
#   count:   positive integer (turns)
#   index:   non-negative integer (step, prompt group)
#   integer: any integer (run tables: dp_rank is -1 for non-rollout clusters)
#   seconds: finite, non-negative float
#   text:    a label; `adapter` may be empty (full-finetune pipelines have none)
#   flag:    boolean
INPUT_KINDS: Final[dict[str, ColumnKind]] = {
    "response_tokens": "length",
    "prompt_tokens": "length",
    "pipeline": "text",
    "adapter": "text",
    "step": "index",
    "group": "index",
    "num_turns": "count",
    "tool_time_s": "seconds",
    CAPPED: "flag",
}
NULLABLE_TEXT: Final = frozenset({"adapter"})

KIND_DTYPES: Final[dict[ColumnKind, str]] = {
    "length": "int64",
    "count": "int64",
    "index": "int64",
    "integer": "int64",
    "seconds": "float64",
    "text": "string",
    "flag": "bool",
}

# --- Run-output tables (DESIGN.md, "A run's output") ------------------------------------------

#: A float64 column of seconds (or a ratio) where NaN means unknown.
OPTIONAL_SECONDS: Final = "float64?"

TableName = Literal["allocations", "steps", "rollouts", "activity", "waits", "jobs"]
#: The tables a run records as it goes; `jobs` is derived from them (rlix.runs.jobs).
TABLE_NAMES: Final[tuple[TableName, ...]] = ("allocations", "steps", "rollouts", "activity", "waits")

# Required columns and their dtypes, in the order they are written. More columns are welcome
# (e.g. one `<stage>_s` column per stage in `steps`) and are kept after these.
TABLE_COLUMNS: Final[dict[TableName, dict[str, str]]] = {
    "allocations": {
        "pipeline_id": "string",
        "cluster": "string",
        "priority": "int64",
        "dp_rank": "int64",  # -1 for non-rollout clusters
        "gpu": "int64",
        "t_start": "float64",
        "t_end": "float64",
    },
    "steps": {
        "pipeline_id": "string",
        "adapter": "string",
        "step": "int64",
        "t_start": "float64",
        "t_end": "float64",
    },
    "rollouts": {
        "pipeline_id": "string",
        "adapter": "string",
        "trajectory_id": "int64",
        "step_consumed": "int64",
        "weight_version": "int64",
        "prompt_tokens": "int64",
        "response_tokens": "int64",
        "t_start": "float64",
        "t_end": "float64",
        "preemptions": "int64",
        "status": "string",
    },
    # Beyond DESIGN.md's three: what a held GPU was doing (rlix.runs.recorder). `kind` is busy
    # (a stage running, or an engine with a trajectory in flight) or loading (moving weights).
    "activity": {
        "pipeline_id": "string",
        "cluster": "string",
        "dp_rank": "int64",
        "gpu": "int64",
        "kind": "string",
        "stage": "string",
        "t_start": "float64",
        "t_end": "float64",
    },
    # One row per granted non-rollout request: how long it queued.
    "waits": {
        "pipeline_id": "string",
        "cluster": "string",
        "priority": "int64",
        "t_request": "float64",
        "t_grant": "float64",
    },
    # One row per pipeline: when it arrived, started, finished (rlix.runs.jobs); NaN: unknown
    # (arrival_s too: a pipeline due after a simulated run was cut never arrived).
    "jobs": {
        "pipeline_id": "string",
        "arrival_s": OPTIONAL_SECONDS,
        "start_s": OPTIONAL_SECONDS,
        "queueing_s": OPTIONAL_SECONDS,
        "finish_s": OPTIONAL_SECONDS,
        "jct_s": OPTIONAL_SECONDS,
        "alone_s": OPTIONAL_SECONDS,
        "slowdown": OPTIONAL_SECONDS,
    },
}
# in_flight: still generating when a run was cut at its time limit.
ROLLOUT_STATUSES: Final = ("completed", "requeued", "aborted", "in_flight")

# A recorded `rollouts` table replays as a trace: its completed rows, with these columns taken
# as the trace's pipeline and step (io.read_trace applies this unless the caller maps them).
ROLLOUTS_AS_TRACE: Final[dict[str, str]] = {"pipeline": "pipeline_id", "step": "step_consumed"}
