"""The invariant checks of the look-ahead's loans (rlix.policy.look_ahead), computed their own
way: from the specs and holdings, never from the core's clocks. Part of
rlix.policy.invariants (invariant 3's reclaim side, and the homes invariant 6 may keep back)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlix.policy.decisions import Decision, Shrink
from rlix.policy.errors import InvariantViolation
from rlix.policy.state import RankStatus

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler
    from rlix.policy.state import PipelineState


def _fail(detail: str) -> None:
    raise InvariantViolation(3, detail)


def check_reclaims(sched: Scheduler, decisions: list[Decision]) -> None:
    """Invariant 3 (look-ahead side): a rank is reclaimed only from a home that is another
    pipeline's alone and whose owner is away (admitted, rolling out, holding and requesting
    nothing), found here from the specs and holdings rather than from the core's clocks."""
    for d in decisions:
        if not (isinstance(d, Shrink) and d.reason == "reclaim"):
            continue
        covering: dict[int, list[PipelineState]] = {g: [] for g in d.gpus}
        for p in sched.pipelines.values():
            for g in covering.keys() & set(p.spec.home):
                covering[g].append(p)
        alone = [ps[0] for ps in covering.values() if len(ps) == 1]  # a GPU in one home only
        if not any(
            p.pipeline_id != d.pipeline_id and p.admitted and not (p.rolling or p.holdings or p.pending) for p in alone
        ):
            _fail(f"{d.pipeline_id} rank {d.dp_rank} reclaimed from no home of an away pipeline alone")


def kept_homes(sched: Scheduler, away_only: bool = False) -> dict[int, str]:
    """GPU -> the pipeline whose home alone covers it, if look-ahead may keep it from loans:
    the owner is away (admitted, holding, requesting and rolling out nothing), or, unless
    `away_only`, rolling out with a training period measured (rule 4)."""
    covering: dict[int, list[PipelineState]] = {}
    for p in sched.pipelines.values():
        for g in p.spec.home:
            covering.setdefault(g, []).append(p)
    return {
        g: ps[0].pipeline_id for g, ps in covering.items()
        if len(ps) == 1 and ps[0].admitted and (
            not (ps[0].rolling or ps[0].holdings or ps[0].pending)
            or (not away_only and ps[0].rolling and ps[0].gang_period_s == ps[0].gang_period_s)
        )
    }


def check_away_set(sched: Scheduler) -> None:
    """The look-ahead's away set (kept by note_left/note_back, read by every round's loans) is
    exactly the registered pipelines marked away, and each of those holds, requests and rolls
    out nothing: a stale entry would lend or reclaim a home for an owner who is back."""
    marked = {p.pipeline_id for p in sched.pipelines.values() if p.away_since_s == p.away_since_s}
    if set(sched.away) != marked:
        _fail(f"away set {sorted(sched.away)} is not the pipelines marked away {sorted(marked)}")
    for pipeline_id, p in sched.away.items():
        if sched.pipelines.get(pipeline_id) is not p or p.rolling or p.holdings or p.pending:
            _fail(f"{pipeline_id} is in the away set but is not away (or not registered)")


def check_warm(sched: Scheduler) -> None:
    """Invariant 3 (warm side, rlix.policy.warm): under a policy that keeps ranks warm, after
    a round a rank loaded for a pipeline that is not rolling out (and not backing off after a
    failed shrink) belongs to a pipeline that may run, and holds no GPU another pipeline's
    home covers and none a waiting request maps to. So does a rank still loading for such a
    pipeline and not to be released once loaded (woken ahead, rlix.policy.wake_ahead), which
    moreover lies on its own pipeline's home. Found here GPU by GPU from the specs and the
    queue, not from the home counts the core keeps."""
    if not (sched.policy.keeps_warm and sched.config.keep_warm):
        return
    wanted: set[int] = set()
    for request in sched.queue:
        wanted.update(sched.pipelines[request.pipeline_id].spec.clusters[request.cluster].mapping)
    for p in sched.pipelines.values():
        if p.rolling and p.pipeline_id in sched.runnable:
            continue
        for rank in p.ranks:
            if rank.status is RankStatus.INACTIVE or rank.shrink_retry_after_s > sched.now:
                continue
            if rank.status is RankStatus.EXPANDING:
                if rank.release_when_applied:
                    continue
                if not set(rank.gpus) <= set(p.spec.home):
                    _fail(f"{p.pipeline_id} rank {rank.dp_rank} is woken ahead on GPUs {list(rank.gpus)}, "
                          f"not all of its home")
            if p.pipeline_id not in sched.runnable:
                _fail(f"{p.pipeline_id} rank {rank.dp_rank} stays loaded, its pipeline may not run")
            for gpu in rank.gpus:
                others = [q.pipeline_id for q in sched.pipelines.values() if q is not p and gpu in q.spec.home]
                if others or gpu in wanted:
                    _fail(f"{p.pipeline_id} rank {rank.dp_rank} stays warm on GPU {gpu}, "
                          f"{'home of ' + ', '.join(others) if others else 'wanted by a waiting request'}")
