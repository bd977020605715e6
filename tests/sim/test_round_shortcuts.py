"""The rollout planner's shortcuts for pools of many jobs make the decisions of the scans they
replace. Two are found from the few GPUs that matter instead of from every pipeline:

- an owner taking its own home back (`Donors._home_back`) looks only at pipelines holding
  ranks on that home's GPUs, not at every pipeline above its target;
- a pipeline in its tail is held at its busy ranks outside reserved GPUs (`_tail_targets`),
  found from the reserved GPUs' holders, not by testing every busy rank against them;
- with no job waiting, the job order returns the admitted jobs kept by the core
  (`Scheduler.admitted_ids`) instead of sorting every pipeline into running and waiting;
- a free fit (and the release of a warm rank) whose free bundles all lie on homes no roller
  may be lent (`Loans.blocked_for_every_roller`) answers without working out the roller's
  own blocked bits; the scan is every roller's own bits, as with those bits taken as none.

Each is checked against the scan it replaced, written out here, on an hour of lab-day (jobs
stacked on shared homes, loans taken back, training requests reserving GPUs under busy
ranks): the event logs must be the same byte for byte, and the run must have gone through the
cases where the two ways could differ.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlix.policy import rollout
from rlix.policy.core import Scheduler
from rlix.policy.donors import Donors
from rlix.policy.look_ahead import Loans, own_home, own_home_slots
from rlix.policy.placement import RoundPlanner
from rlix.sim import simulate


def _home_back_by_scan(self: Donors, pipeline: Any, planner: Any) -> Any:
    """Every pipeline above its target is a donor; donor_fit skips the ranks off the home."""
    only = own_home_slots(self.sched, pipeline)
    if not only:
        return None
    targets = self.sched.targets
    above = [d for d in self.by_work() if d is not pipeline and d.num_active_gpus > targets.get(d.pipeline_id, 0)]
    if not above:
        return None
    planner.any_donor = True
    try:
        return planner.donor_fit(pipeline, above, only, own_home(self.sched, pipeline)[1])
    finally:
        planner.any_donor = False


def _tail_targets_by_scan(sched: Any, rollers: Any, demands: Any, budget: int) -> Any:
    """Each busy active rank tested against the reserved GPUs."""
    reserved = sched.reservations.reserved_for
    fixed: dict[str, int] = {}
    spread: dict[str, int] = {}
    others = 0
    for pipeline, demand in zip(rollers, demands, strict=True):
        first_bundle = pipeline.tp if demand > 0 else 0
        if pipeline.in_tail:
            busy = sum(len(r.gpus) for dp, r in pipeline.active.items()
                       if dp in pipeline.busy and not any(g in reserved for g in r.gpus))
            batch = sched.config.tail_spread_batch
            if not (batch and rollout.spreads(sched, pipeline, batch)):
                fixed[pipeline.pipeline_id] = max(busy, first_bundle)
                continue
            spread[pipeline.pipeline_id] = busy
        others += first_bundle
    return (fixed if sum(fixed.values()) + others <= budget else {}), spread


@pytest.fixture(scope="module")
def hour_of_lab_day(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = yaml.safe_load(resources.files("rlix.scenarios").joinpath("data", "lab-day.yaml").read_text())
    data["stream"]["duration_s"] = 3600
    # Tails held at their busy ranks, lab-day's setting before, so that the tail shortcut is reached.
    data["policy"]["config"]["keep_busy_tail"] = True
    path = tmp_path_factory.mktemp("scenario") / "hour.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_shortcuts_decide_as_the_scans_do(hour_of_lab_day: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {"home_back_found": 0, "tail_on_reserved": 0, "free_fit_skipped": 0}
    fast_home_back = Donors._home_back

    def counting_home_back(self: Donors, pipeline: Any, planner: Any) -> Any:
        found = fast_home_back(self, pipeline, planner)
        seen["home_back_found"] += found is not None
        return found

    fast_tail_targets = rollout._tail_targets

    def counting_tail_targets(sched: Any, rollers: Any, demands: Any, budget: int) -> Any:
        reserved = sched.reservations.reserved_for
        seen["tail_on_reserved"] += any(
            p.in_tail and any(g in reserved for dp, r in p.active.items() if dp in p.busy for g in r.gpus)
            for p in rollers)
        return fast_tail_targets(sched, rollers, demands, budget)

    fast_free_fit = RoundPlanner.free_fit

    def counting_free_fit(self: RoundPlanner, pipeline: Any) -> Any:
        candidates = self.cluster.free_bits & pipeline.slot_bits
        seen["free_fit_skipped"] += bool(
            candidates and self.loans is not None and pipeline.pipeline_id not in self._forbidden
            and not candidates & ~self.loans.blocked_for_every_roller())
        return fast_free_fit(self, pipeline)

    with monkeypatch.context() as patch:
        patch.setattr(Donors, "_home_back", counting_home_back)
        patch.setattr(rollout, "_tail_targets", counting_tail_targets)
        patch.setattr(RoundPlanner, "free_fit", counting_free_fit)
        fast = simulate(hour_of_lab_day, out=tmp_path / "fast", plots=False, tables={"jobs"})
    with monkeypatch.context() as patch:
        patch.setattr(Donors, "_home_back", _home_back_by_scan)
        patch.setattr(rollout, "_tail_targets", _tail_targets_by_scan)
        # An id no job has: the job order never takes its shortcut and sorts every round.
        patch.setattr(Scheduler, "admitted_ids", lambda self: frozenset({"\0no job"}))
        patch.setattr(Loans, "blocked_for_every_roller", lambda self: 0)
        scan = simulate(hour_of_lab_day, out=tmp_path / "scan", plots=False, tables={"jobs"})
    assert fast.summary["finished"] and scan.summary["finished"]
    # The run went where the two ways could part: owners took home back from holders,
    # pipelines in their tail had busy ranks on reserved GPUs, and free fits found every free
    # bundle on homes kept for their owners.
    assert seen["home_back_found"] > 10 and seen["tail_on_reserved"] > 10 and seen["free_fit_skipped"] > 10, seen
    events = [(folder / "events.jsonl").read_bytes() for folder in (tmp_path / "fast", tmp_path / "scan")]
    assert events[0] == events[1]
