"""From decision to effect, read from a run's event log (both drivers write the same one).

A weight load is timed from the core's Expand to its DecisionApplied report, an offload from
the Shrink to its report, a grant likewise: what the simulator's actuator charges between the
two, so the driver's own overhead (actor calls, a rank's wake-up) is in what is fitted, not
only the span a rank spent moving weights (`activity`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from rlix.runs.reader import Run

#: Decisions the driver carries out and reports, and the stage name each one's span gets.
CARRIED_OUT = {"Expand": "load", "Shrink": "offload", "Grant": "grant"}


def decision_spans(run: Run) -> pd.DataFrame:
    """One row per decision carried out and applied: stage (load, offload, grant), pipeline_id,
    dp_rank, requires (whether it waited for other decisions), t_start (decided), t_end
    (applied), duration_s, first (a rank's first load)."""
    pending: dict[int, dict[str, Any]] = {}
    rows = []
    for record in run.events():
        event = record["event"]
        now = float(event["now"])
        if event["type"] == "DecisionApplied":
            row = pending.pop(int(event["decision_id"]), None)
            if row is not None:
                rows.append({**row, "t_end": now})
        elif event["type"] == "DecisionFailed":
            pending.pop(int(event["decision_id"]), None)
        for decision in record["decisions"]:
            stage = CARRIED_OUT.get(decision["type"])
            if stage is not None:
                pending[int(decision["decision_id"])] = {
                    "stage": stage, "pipeline_id": decision["pipeline_id"], "dp_rank": int(decision.get("dp_rank", -1)),
                    "requires": bool(decision.get("requires")), "t_start": now,
                }
    columns = ["stage", "pipeline_id", "dp_rank", "requires", "t_start", "t_end"]
    frame = pd.DataFrame(rows, columns=columns).sort_values("t_start", kind="stable")
    first = ~frame.duplicated(["pipeline_id", "dp_rank", "stage"]) & (frame["stage"] == "load")
    return frame.assign(duration_s=frame["t_end"] - frame["t_start"], first=first).reset_index(drop=True)


def driver_overhead(spans: pd.DataFrame) -> dict[str, Any]:
    """What the driver adds between a decision and its effect, for the report: grants that
    waited for nothing (pure driver latency), in seconds."""
    grants = spans[(spans["stage"] == "grant") & ~spans["requires"]]["duration_s"].to_numpy(float)
    if not len(grants):
        return {"grants": 0}
    return {"grants": len(grants), "grant_latency_mean_s": float(grants.mean()),
            "grant_latency_p95_s": float(np.percentile(grants, 95))}
