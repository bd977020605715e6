"""Who may run now: placing sized homes, and the job queue of the policies without sharing.

The admit-at-once policies (rlix, gap-ratio) let every admitted pipeline run; a home given as a
size is placed as soon as the pipeline is admitted, on GPUs no other home covers or else
stacked on an existing home of its size that crosses no other (`place_admitted`,
`rlix.policy.homes.choose_shared_home`). Training clusters of pipelines whose homes overlap are
then serialised by the priority queue of non-rollout requests (a request waits for its whole
mapping; holders are never preempted), as RLix does.

The queueing policies are what a lab runs without sharing, a Slurm-style queue of gang jobs:

- `static`: FIFO by arrival. A job starts when its whole home is free (a sized home: first fit
  on the free GPUs, whole nodes first) and then holds it to its last step. The first job that
  cannot start is the *head*. Jobs behind it start only if they cannot delay any job ahead of
  them: an explicit home disjoint from every GPU taken or wanted ahead of it; nothing at all
  behind a sized head (it could be placed anywhere).
- `static-backfill`: the same with EASY backfill (Slurm's default). The head gets a
  reservation: the *shadow time* at which it can start if every running job ends at its start
  plus its runtime estimate (`PipelineSpec.runtime_estimate_s`), and the GPUs it would get then;
  if a job it waits for has no estimate, nothing may pass it. A later job may start now if it fits the free GPUs and either ends (by its
  estimate) by the shadow time or leaves the reserved GPUs alone; so with true estimates the
  head never starts later than without backfill. Only the head is protected, as in EASY.
- `sequential`: one job at a time, in arrival order, on the whole pool.

A job that started is never stopped by the queue (it runs to its last step), so the queue only
ever adds to the jobs that run. Start times are kept by the policy object (a replay builds a
fresh one and sees the same events).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from rlix.policy.homes import choose_home, choose_shared_home, placement_unit
from rlix.policy.lifecycle import place

if TYPE_CHECKING:
    from rlix.policy.core import Scheduler
    from rlix.policy.state import PipelineState


def place_admitted(sched: Scheduler) -> None:
    """Place every admitted sized home not placed yet, in admission order, among the homes of
    every pipeline (placed or given) by the shared rule (`choose_shared_home`)."""
    waiting = [p for p in sched.admitted_in_order() if not p.spec.placed]
    if not waiting:
        return
    cover = HomeCover(sched, sched.pipelines.values())
    usable = set(range(sched.topology.num_gpus)) - sched.cluster.offline
    for pipeline in waiting:
        place_shared(sched, pipeline, cover, usable)  # if not: tried again next round


class HomeCover:
    """The homes of some pipelines, how many of them cover each GPU, the expected runtimes of
    the jobs on each home and when the last of them is expected to end (a home holding a job
    of unknown runtime is alike to none)."""

    def __init__(self, sched: Scheduler, pipelines: Iterable[PipelineState]) -> None:
        self.now_s = sched.now
        self.load = [0] * sched.topology.num_gpus
        self.homes: set[tuple[int, ...]] = set()  # sorted GPU ids
        self.runtimes_s: dict[tuple[int, ...], list[float]] = {}
        self.last_end_s: dict[tuple[int, ...], float] = {}  # the latest expected: admission + runtime
        self.unknown: set[tuple[int, ...]] = set()  # homes holding a job of unknown runtime
        for pipeline in pipelines:
            if pipeline.spec.home:
                start_s = pipeline.admitted_s if pipeline.admitted else sched.now
                self.add(pipeline.spec.home, pipeline.spec.runtime_estimate_s, start_s)

    def add(self, home: tuple[int, ...], runtime_s: float | None = None, start_s: float | None = None) -> None:
        """Count a job of `runtime_s` on `home`, started at `start_s` (default: now)."""
        key = tuple(sorted(home))
        self.homes.add(key)
        if runtime_s:
            self.runtimes_s.setdefault(key, []).append(runtime_s)
            end_s = (self.now_s if start_s is None else start_s) + runtime_s
            self.last_end_s[key] = max(end_s, self.last_end_s.get(key, end_s))
        else:
            self.unknown.add(key)
        for gpu in home:
            self.load[gpu] += 1

    def unlike(self, runtime_s: float) -> Callable[[tuple[int, ...]], float]:
        """How unlike a job of `runtime_s` is to the jobs on a home: |log| of the ratio of their
        mean expected runtime to it. A home with a job whose runtime is not known is infinitely
        unlike: nothing says that job is short or long, so stacking on it is the last resort of
        rule 2 and never rule 0's "alike"."""
        return self._log_distance(self.runtimes_s, runtime_s)

    def apart(self, runtime_s: float) -> Callable[[tuple[int, ...]], float]:
        """How far a home's emptying is from the departure of a new job of `runtime_s`: |log| of
        the ratio of the time until the last of its jobs is expected to leave (at least 1 s: a
        job past its estimate is expected to leave now) to it. The last, not the mean: a stack
        is empty only once its last job leaves. A home with a job of unknown runtime is
        infinitely far."""
        left_s = {home: [max(1.0, end_s - self.now_s)] for home, end_s in self.last_end_s.items()}
        return self._log_distance(left_s, runtime_s)

    def _log_distance(self, values_s: dict[tuple[int, ...], list[float]],
                      runtime_s: float) -> Callable[[tuple[int, ...]], float]:
        """|log| of the ratio of the mean of a home's `values_s` to `runtime_s`; infinite for a
        home holding a job of unknown runtime."""
        def distance(home: tuple[int, ...]) -> float:
            values = values_s.get(home)
            if home in self.unknown or not values:
                return math.inf
            return abs(math.log(sum(values) / len(values) / runtime_s))

        return distance


def place_shared(sched: Scheduler, pipeline: PipelineState, cover: HomeCover, usable: set[int]) -> bool:
    """Place the pipeline's sized home on `usable` GPUs by the shared rule, among the homes of
    `cover` (which then counts it too); False if they cannot hold it (more GPUs lost than the
    pool can spare)."""
    spec = pipeline.spec
    runtime_s = spec.runtime_estimate_s
    like = sched.policy.stacks_by_runtime and sched.config.stack_by_runtime
    together = like and sched.config.stack_by_departure
    home = choose_shared_home(spec.home_size, placement_unit(spec), usable, sched.topology, cover.load, cover.homes,
                              cover.unlike(runtime_s) if like and runtime_s else None,
                              sched.config.alike_stack_depth if like else 0,
                              cover.apart(runtime_s) if together and runtime_s else None,
                              sched.config.alike_reserve_homes)
    if home is None:
        return False
    place(sched, pipeline, home, confine=False)
    cover.add(pipeline.spec.home, runtime_s)
    return True


class JobQueue:
    """The queue of the policies without sharing (module docstring). `confine` keeps a placed
    home's pool-wide clusters on the home; `backfill` is EASY backfill."""

    def __init__(self, confine: bool, backfill: bool) -> None:
        self.confine = confine
        self.backfill = backfill
        self.started_s: dict[str, float] = {}
        # The last answer, the state it was worked out from and until when it holds (`_unchanged`).
        self._last: tuple[tuple[object, ...], frozenset[str], float] | None = None

    def _state_key(self, sched: Scheduler, running: frozenset[str]) -> tuple[object, ...]:
        """What the answer depends on besides the clock: the admissions and removals (every
        admission draws a sequence number), the jobs running and the GPUs offline."""
        return (sched.next_seq, len(sched.pipelines), running, frozenset(sched.cluster.offline))

    def _unchanged(self, sched: Scheduler) -> frozenset[str] | None:
        """The last answer if nothing it depends on changed since. Most rounds of a long queue
        follow an event that starts and ends no job (rollout progress); working the queue out
        again would give the same answer, since a job that could not start then cannot now.
        The clock matters only to backfill, and only once a running job passes its expected
        end (the reservation then orders the jobs overrunning their estimates differently), so
        the answer is kept until the first such end."""
        if self._last is None:
            return None
        key, answer, valid_until_s = self._last
        if sched.now >= valid_until_s or self._state_key(sched, sched.runnable) != key:
            return None
        return answer

    def runnable(self, sched: Scheduler) -> frozenset[str]:
        answer = self._unchanged(sched)
        if answer is None:
            answer = self._work_out(sched)
        return answer

    def _work_out(self, sched: Scheduler) -> frozenset[str]:
        admitted = sched.admitted_in_order()
        running = [p for p in admitted if p.pipeline_id in sched.runnable]
        taken: set[int] = set()
        for pipeline in running:
            taken |= pipeline.spec.footprint
        wanted: set[int] = set()  # GPUs that jobs waiting ahead want (explicit homes)
        # The (size, unit, GPUs avoided) of sized homes that did not fit: the GPUs taken only
        # grow during the call and fitting needs only enough free chunks, so a job like one
        # that did not fit does not either (a long queue costs one placement per kind of job).
        no_room: set[tuple[int, int, int]] = set()
        head: PipelineState | None = None
        reservation: tuple[float, frozenset[int]] | None = None  # worked out when first needed
        for pipeline in admitted:
            if pipeline.pipeline_id in sched.runnable:
                continue
            if head is None:
                if self._try_start(sched, pipeline, taken, wanted, running, no_room):
                    continue
                if pipeline.spec.placed:
                    wanted |= pipeline.spec.footprint
                if not self.backfill and not pipeline.spec.placed:
                    break  # a sized job waits: anything behind it could delay it
                if self.backfill:
                    head = pipeline
                continue
            if not _could_fit(sched, pipeline, taken):
                continue  # the common case in a busy queue: skip the reservation's cost
            if reservation is None:
                reservation = self._reservation(sched, head, running)
            shadow_s, reserved = reservation
            end_s = sched.now + _estimate(pipeline)
            if end_s < math.inf and end_s <= shadow_s:  # ends before the head could start
                self._try_start(sched, pipeline, taken, frozenset(), running, no_room)
            else:
                self._try_start(sched, pipeline, taken, reserved, running, no_room)
        answer = frozenset(p.pipeline_id for p in running)
        valid_until_s = math.inf
        if head is not None:  # a backfill reservation: until a running job passes its expected end
            ends_s = (self.started_s.get(p.pipeline_id, sched.now) + _estimate(p) for p in running)
            valid_until_s = min((end_s for end_s in ends_s if end_s > sched.now), default=math.inf)
        self._last = (self._state_key(sched, answer), answer, valid_until_s)
        return answer

    def _try_start(
        self, sched: Scheduler, pipeline: PipelineState, taken: set[int], avoid: set[int] | frozenset[int],
        running: list[PipelineState], no_room: set[tuple[int, int, int]],
    ) -> bool:
        """Start `pipeline` if it fits the GPUs neither taken nor in `avoid` (placing a sized home
        first fit); the GPUs it takes join `taken`, a size that did not fit joins `no_room`."""
        spec = pipeline.spec
        if spec.placed:
            if not spec.footprint.isdisjoint(taken) or not spec.footprint.isdisjoint(avoid):
                return False
        else:
            unit = placement_unit(spec)
            kind = (spec.home_size, unit, id(avoid))
            if kind in no_room:
                return False
            usable = set(range(sched.topology.num_gpus)) - taken - set(avoid) - sched.cluster.offline
            home = choose_home(spec.home_size, unit, usable, sched.topology)
            if home is None:
                no_room.add(kind)
                return False
            place(sched, pipeline, home, self.confine)
        taken |= pipeline.spec.footprint
        running.append(pipeline)
        self.started_s[pipeline.pipeline_id] = sched.now
        return True

    def _reservation(
        self, sched: Scheduler, head: PipelineState, running: list[PipelineState]
    ) -> tuple[float, frozenset[int]]:
        """When the head could start if the running jobs end as estimated, and on which GPUs."""
        num_gpus = sched.topology.num_gpus
        busy = {g for p in running for g in p.spec.footprint}
        ends = sorted(
            (max(sched.now, self.started_s.get(p.pipeline_id, sched.now) + _estimate(p)), p.admitted_seq, p)
            for p in running
        )
        for end_s, _seq, pipeline in [(sched.now, -1, None), *ends]:
            if pipeline is not None:
                busy -= pipeline.spec.footprint
            gpus = _fits(sched, head, set(range(num_gpus)) - busy)
            if gpus is not None and end_s < math.inf:
                return end_s, gpus
        # Some job ahead of the head has no estimate: when and where the head starts is not
        # known, so nothing may pass it (without estimates EASY is FIFO).
        return math.inf, frozenset(range(num_gpus))


def _could_fit(sched: Scheduler, pipeline: PipelineState, taken: set[int]) -> bool:
    """A cheap necessary condition for starting now: its home is free, or enough GPUs are."""
    spec = pipeline.spec
    if spec.placed:
        return spec.footprint.isdisjoint(taken)
    return spec.home_size <= sched.topology.num_gpus - len(taken | sched.cluster.offline)


def _fits(sched: Scheduler, pipeline: PipelineState, free: set[int]) -> frozenset[int] | None:
    spec = pipeline.spec
    if spec.placed:
        return spec.footprint if spec.footprint <= free else None
    home = choose_home(spec.home_size, placement_unit(spec), free - sched.cluster.offline, sched.topology)
    return None if home is None else frozenset(home)


def _estimate(pipeline: PipelineState) -> float:
    estimate = pipeline.spec.runtime_estimate_s
    return math.inf if estimate is None else estimate
