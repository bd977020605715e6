"""Hypothesis stateful tests: random interleavings of every event kind, for every policy.

The scheduler runs with `check_invariants=True`, so each of the ten invariants a policy
guarantees is checked after every event. The machine checks the main ones again its own way,
from the decisions alone (`tests.policy.replay_model`: GPU conservation against the core's owner
table, gang and bundle shapes, the pacing bound), so a checker that stopped checking would not
leave these runs unguarded. Bad events must raise a typed error and leave the
state exactly as it was. RLIX_HYPOTHESIS_EXAMPLES sets the examples per policy (default 500).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from rlix.policy import (
    ROLLOUT_CLUSTER,
    ClusterReleased,
    ClusterReleasedAndRequested,
    ClusterRequested,
    ClusterSpec,
    DecisionApplied,
    DecisionFailed,
    DecisionsApplied,
    Event,
    Expand,
    GpuLost,
    GpuRestored,
    Grant,
    PipelineAdmitted,
    PipelineKind,
    PipelineRegistered,
    PipelineRemoved,
    PipelineSpec,
    PolicyConfig,
    PolicyError,
    RanksProgressed,
    RequestWithdrawn,
    Revoke,
    RolloutProgressed,
    Scheduler,
    Shrink,
    Tick,
    Topology,
    TrainStepFinished,
)
from rlix.policy.state import HoldStatus, PipelineState
from tests.policy.builders import pipeline_specs, topologies
from tests.policy.digest import digest
from tests.policy.replay_model import DecisionReplay

EXAMPLES = int(os.environ.get("RLIX_HYPOTHESIS_EXAMPLES", "500"))
#: The defaults, and the corners: retry and rebalance at once, a margin with a short interval,
#: the split weighted by projected time left.
CONFIGS = [
    PolicyConfig(),
    PolicyConfig(retry_backoff_s=0.0, min_rebalance_interval_s=0.0),
    PolicyConfig(retry_backoff_s=3.0, rebalance_margin_bundles=0.5, min_rebalance_interval_s=5.0),
    PolicyConfig(finish_together=12.0, min_rebalance_interval_s=0.0),
    PolicyConfig(finish_together=2.0, finish_floor=1.0),  # equal weights; long weighed tails not held
]


class SchedulerMachine(RuleBasedStateMachine):
    policy_name = "rlix"

    @initialize(topology=topologies(), config=st.sampled_from(CONFIGS))
    def setup(self, topology: Topology, config: PolicyConfig) -> None:
        self.topology = topology
        self.sched = Scheduler(topology, self.policy_name, config=config, check_invariants=True)
        self.now = 0.0
        self.num_registered = 0
        self.outstanding: dict[int, Grant | Expand | Shrink] = {}
        self.failed: set[int] = set()
        self.replay = DecisionReplay(topology.num_gpus)

    # --- plumbing ---------------------------------------------------------------------------

    def send(self, event: Event) -> None:
        decisions = self.sched.handle(event)
        # Conservation, gang wholeness and pacing, from the decisions alone (replay_model.py).
        self.replay.observe(event, decisions, self.sched)
        for decision in decisions:
            if isinstance(decision, Grant | Expand | Shrink):
                self.outstanding[decision.decision_id] = decision
            elif isinstance(decision, Revoke):
                self._revoked(decision)

    def _revoked(self, revoke: Revoke) -> None:
        """A Revoke ends the holding's latest decision in flight (the Grant of that cluster, or
        the rank's latest Expand or Shrink): the driver no longer reports it, and a report of
        it is ignored, so it is no longer outstanding here either. An earlier Shrink of the
        same rank (an Expand queued behind it) is still in flight."""
        if revoke.dp_rank == -1:
            matching = [
                d for d, dec in self.outstanding.items()
                if isinstance(dec, Grant) and (dec.pipeline_id, dec.cluster) == (revoke.pipeline_id, revoke.cluster)
            ]
        else:
            matching = [
                d for d, dec in self.outstanding.items()
                if isinstance(dec, Expand | Shrink)
                and (dec.pipeline_id, dec.dp_rank) == (revoke.pipeline_id, revoke.dp_rank)
            ]
        if matching:
            del self.outstanding[max(matching)]

    def send_bad(self, event: Event) -> None:
        before = digest(self.sched)
        with pytest.raises(PolicyError):
            self.sched.handle(event)
        assert digest(self.sched) == before, f"{event} changed the state before failing"

    def pipelines(self, admitted: bool | None = None) -> list[str]:
        return sorted(
            pid for pid, p in self.sched.pipelines.items() if admitted is None or p.admitted == admitted
        )

    # --- pipelines ---------------------------------------------------------------------------

    @rule(data=st.data())
    def register(self, data: st.DataObject) -> None:
        pid = f"p{self.num_registered}"
        self.num_registered += 1
        homes = self.policy_name == "rlix"  # the look-ahead's homes: rlix alone keeps them
        self.send(PipelineRegistered(self.now, data.draw(pipeline_specs(self.topology, pid, homes))))

    @rule(data=st.data(), rolling=st.booleans())
    def register_and_admit(self, data: st.DataObject, rolling: bool) -> None:
        """The common case, so that interesting states (several pipelines rolling) come often."""
        self.register(data)
        pid = f"p{self.num_registered - 1}"
        self.send(PipelineAdmitted(self.now, pid))
        if rolling:
            estimate = data.draw(st.integers(1, 500))
            self.send(ClusterRequested(self.now, pid, ROLLOUT_CLUSTER, 6, estimate))

    @precondition(lambda self: self.pipelines(admitted=False))
    @rule(data=st.data())
    def admit(self, data: st.DataObject) -> None:
        self.send(PipelineAdmitted(self.now, data.draw(st.sampled_from(self.pipelines(admitted=False)))))

    @precondition(lambda self: self.pipelines())
    @rule(data=st.data(), failed=st.booleans())
    def remove(self, data: st.DataObject, failed: bool) -> None:
        pid = data.draw(st.sampled_from(self.pipelines()))
        self.send(PipelineRemoved(self.now, pid, failed))
        for decision_id in [d for d, dec in self.outstanding.items() if dec.pipeline_id == pid]:
            del self.outstanding[decision_id]

    # --- requests and releases --------------------------------------------------------------

    def _requestable(self, pid: str) -> list[tuple[str, int]]:
        pipeline = self.sched.pipelines[pid]
        options = []
        for name in pipeline.spec.clusters:
            if name in pipeline.pending or name in pipeline.holdings:
                continue
            if name == ROLLOUT_CLUSTER:
                if not pipeline.rolling:
                    options.append((name, 6))
                    if not self._waits_on_itself(pipeline, name):
                        options.append((name, 0))
            elif not self._waits_on_itself(pipeline, name):
                options.extend((name, priority) for priority in (0, 1, 2, 3, 4, 5))
        return options

    @staticmethod
    def _waits_on_itself(pipeline: PipelineState, cluster: str) -> bool:
        """A gang over GPUs the pipeline holds in another cluster: the core refuses it
        (test_a_gang_over_its_own_holding_is_refused)."""
        wanted = set(pipeline.spec.clusters[cluster].mapping)
        return any(wanted & set(hold.gpus) for hold in pipeline.holdings.values())

    @precondition(lambda self: self.pipelines(admitted=True))
    @rule(data=st.data(), estimate=st.one_of(st.none(), st.integers(0, 500)))
    def request(self, data: st.DataObject, estimate: int | None) -> None:
        pid = data.draw(st.sampled_from(self.pipelines(admitted=True)))
        options = self._requestable(pid)
        if options:
            cluster, priority = data.draw(st.sampled_from(options))
            self.send(ClusterRequested(self.now, pid, cluster, priority, estimate))

    def _withdrawable(self) -> list[tuple[str, str]]:
        found = []
        for pid, pipeline in self.sched.pipelines.items():
            found += [(pid, cluster) for cluster in pipeline.pending]
            if pipeline.rolling:
                found.append((pid, ROLLOUT_CLUSTER))
        return sorted(found)

    @precondition(lambda self: self._withdrawable())
    @rule(data=st.data())
    def withdraw(self, data: st.DataObject) -> None:
        pid, cluster = data.draw(st.sampled_from(self._withdrawable()))
        self.send(RequestWithdrawn(self.now, pid, cluster))

    def _releasable(self) -> list[tuple[str, str]]:
        found = []
        for pid, pipeline in self.sched.pipelines.items():
            found += [(pid, c) for c, h in pipeline.holdings.items() if h.status is HoldStatus.HELD]
            if pipeline.rolling:
                found.append((pid, ROLLOUT_CLUSTER))
        return sorted(found)

    @precondition(lambda self: self._releasable())
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        pid, cluster = data.draw(st.sampled_from(self._releasable()))
        self.send(ClusterReleased(self.now, pid, cluster))

    @precondition(lambda self: self._releasable())
    @rule(data=st.data(), estimate=st.integers(1, 300))
    def release_and_request(self, data: st.DataObject, estimate: int) -> None:
        pid, released = data.draw(st.sampled_from(self._releasable()))
        pipeline = self.sched.pipelines[pid]
        options = [(released, 6 if released == ROLLOUT_CLUSTER else 1)] + self._requestable(pid)
        cluster, priority = data.draw(st.sampled_from(options))
        if cluster == ROLLOUT_CLUSTER and priority != 6 and pipeline.rolling and released != cluster:
            return
        self.send(ClusterReleasedAndRequested(self.now, pid, released, cluster, priority, estimate))

    @precondition(lambda self: any(p.rolling for p in self.sched.pipelines.values()))
    @rule(data=st.data(), remaining=st.integers(0, 1000))
    def progress(self, data: st.DataObject, remaining: int) -> None:
        pid = data.draw(st.sampled_from(sorted(p for p, s in self.sched.pipelines.items() if s.rolling)))
        adapters = list(self.sched.pipelines[pid].spec.adapters) or [None]
        self.send(RolloutProgressed(self.now, pid, remaining, data.draw(st.sampled_from(adapters))))

    @precondition(lambda self: any(p.rolling for p in self.sched.pipelines.values()))
    @rule(data=st.data(), packed=st.booleans())
    def ranks_report(self, data: st.DataObject, packed: bool) -> None:
        """Where a rolling pipeline's trajectories run: on its active ranks (a few, or packed
        many to a rank, so that on-policy tails on migrating engines spread), with some queued
        or none (its tail)."""
        pid = data.draw(st.sampled_from(sorted(p for p, s in self.sched.pipelines.items() if s.rolling)))
        pipeline = self.sched.pipelines[pid]
        counts = st.integers(0, 80) if packed else st.integers(0, 3)
        pairs = tuple((rank, data.draw(counts)) for rank in sorted(pipeline.active))
        queued = data.draw(st.sampled_from([0, 0, data.draw(st.integers(1, 50))]))
        self.send(RanksProgressed(self.now, pid, pairs, queued))

    @precondition(lambda self: self.pipelines())
    @rule(data=st.data())
    def step_finished(self, data: st.DataObject) -> None:
        pid = data.draw(st.sampled_from(self.pipelines()))
        pipeline = self.sched.pipelines[pid]
        adapter = data.draw(st.sampled_from(sorted(pipeline.versions)))
        event_adapter = None if adapter == "base" else adapter
        self.send(TrainStepFinished(self.now, pid, pipeline.versions[adapter] + 1, event_adapter))

    # --- carrying decisions out -------------------------------------------------------------

    def _appliable(self) -> list[int]:
        return sorted(
            d for d, dec in self.outstanding.items()
            if not any(r in self.outstanding or r in self.failed for r in dec.requires)
        )

    @precondition(lambda self: self._appliable())
    @rule(data=st.data())
    def apply(self, data: st.DataObject) -> None:
        decision_id = data.draw(st.sampled_from(self._appliable()))
        del self.outstanding[decision_id]
        self.send(DecisionApplied(self.now, decision_id))

    @precondition(lambda self: self._appliable())
    @rule()
    def apply_all(self) -> None:
        """The driver catches up: what it can carry out is applied, in order. Bounded, because
        under the RLix model a blocked request makes every round shrink and re-expand."""
        for _ in range(64):
            appliable = self._appliable()
            if not appliable:
                break
            del self.outstanding[appliable[0]]
            self.send(DecisionApplied(self.now, appliable[0]))

    @precondition(lambda self: len(self._appliable()) >= 2)
    @rule(data=st.data())
    def apply_together(self, data: st.DataObject) -> None:
        """Some of what can be applied now, reported in one `DecisionsApplied` (a driver whose
        weight loads end together); any order works, since none requires another."""
        appliable = self._appliable()
        chosen = data.draw(st.lists(st.sampled_from(appliable), min_size=2, unique=True))
        for decision_id in chosen:
            del self.outstanding[decision_id]
        self.send(DecisionsApplied(self.now, tuple(chosen)))

    @precondition(lambda self: self.outstanding)
    @rule(data=st.data())
    def fail(self, data: st.DataObject) -> None:
        decision_id = data.draw(st.sampled_from(sorted(self.outstanding)))
        doomed = [decision_id]
        while doomed:
            current = doomed.pop()
            if current not in self.outstanding:
                continue
            del self.outstanding[current]
            self.failed.add(current)
            self.send(DecisionFailed(self.now, current, "injected"))
            doomed += [d for d, dec in self.outstanding.items() if current in dec.requires]

    @precondition(lambda self: self.failed)
    @rule(data=st.data())
    def report_twice(self, data: st.DataObject) -> None:
        """A repeated failure report is a no-op."""
        decision_id = data.draw(st.sampled_from(sorted(self.failed)))
        before = digest(self.sched)["inflight"]
        self.send(DecisionFailed(self.now, decision_id))
        assert set(before) <= set(digest(self.sched)["inflight"])

    # --- GPUs and time ----------------------------------------------------------------------

    @rule(data=st.data())
    def gpu_lost_or_back(self, data: st.DataObject) -> None:
        gpu = data.draw(st.integers(0, self.topology.num_gpus - 1))
        if gpu in self.sched.cluster.offline:
            self.send(GpuRestored(self.now, gpu))
        elif len(self.sched.cluster.offline) < 2:
            self.send(GpuLost(self.now, gpu))

    def _away(self) -> list[str]:
        return sorted(pid for pid, p in self.sched.pipelines.items()
                      if p.admitted and p.spec.home and p.away_since_s == p.away_since_s)

    @precondition(lambda self: self._away())
    @rule(data=st.data(), away_s=st.sampled_from([2.0, 8.0, 20.0]), estimate=st.integers(1, 300))
    def come_back(self, data: st.DataObject, away_s: float, estimate: int) -> None:
        """A pipeline away between steps comes back after a while (to roll out or to train),
        so that absences are measured and the look-ahead keeps and reclaims homes."""
        pid = data.draw(st.sampled_from(self._away()))
        self.now += away_s
        self.send(Tick(self.now))
        if pid in self.sched.pipelines and self._requestable(pid):
            cluster, priority = data.draw(st.sampled_from(self._requestable(pid)))
            self.send(ClusterRequested(self.now, pid, cluster, priority, estimate))

    @precondition(lambda self: any(p.rolling and p.active for p in self.sched.pipelines.values()))
    @rule(data=st.data(), tail_s=st.sampled_from([5.0, 200.0]), estimate=st.integers(1, 300),
          num_steps=st.integers(1, 3))
    def whole_tails(self, data: st.DataObject, tail_s: float, estimate: int, num_steps: int) -> None:
        """A rolling pipeline's steps, each a tail from its first report with nothing queued to
        the end of its rollout `tail_s` later, a new version of every adapter then (and as the
        first tail begins, of those with none yet: an off-policy step's training may end during
        a rollout), its next rollout and the driver catching up: so that tails and step periods
        are measured, and finishing together weighs pipelines and releases their tails
        (rlix.policy.finish) while they run on busy ranks."""
        pid = data.draw(st.sampled_from(sorted(p for p, s in self.sched.pipelines.items() if s.rolling and s.active)))
        self._new_versions(pid, only_first=True)
        for _ in range(num_steps):
            pipeline = self.sched.pipelines.get(pid)
            if pipeline is None or not pipeline.rolling:
                return
            self.send(RanksProgressed(self.now, pid, tuple((rank, 1) for rank in sorted(pipeline.active)), 0))
            self.now += tail_s
            self.send(Tick(self.now))
            if pid not in self.sched.pipelines or not self.sched.pipelines[pid].rolling:
                return
            self.send(ClusterReleased(self.now, pid, ROLLOUT_CLUSTER))
            self._new_versions(pid)
            if pid not in self.sched.pipelines or (ROLLOUT_CLUSTER, 6) not in self._requestable(pid):
                return
            self.send(ClusterRequested(self.now, pid, ROLLOUT_CLUSTER, 6, estimate))
            self.apply_all()

    def _new_versions(self, pid: str, only_first: bool = False) -> None:
        """A new version of each adapter of the pipeline (with `only_first`, of those that have
        none yet)."""
        if pid not in self.sched.pipelines:
            return
        pipeline = self.sched.pipelines[pid]
        for adapter, version in sorted(pipeline.versions.items()):
            if not (only_first and adapter in pipeline.first_version_at):
                self.send(TrainStepFinished(self.now, pid, version + 1, None if adapter == "base" else adapter))

    @rule(dt=st.sampled_from([0.0, 0.5, 3.0, 10.0]))
    def tick(self, dt: float) -> None:
        self.now += dt
        self.send(Tick(self.now))

    # --- bad input ------------------------------------------------------------------------

    @rule(data=st.data())
    def bad_event(self, data: st.DataObject) -> None:
        self.send_bad(data.draw(st.sampled_from(self._bad_events())))

    def _bad_events(self) -> list[Event]:
        now = self.now
        topo = self.topology
        bad: list[Event] = [
            ClusterRequested(now, "nobody", "actor_train", 1),
            RolloutProgressed(now, "nobody", 1),
            DecisionApplied(now, 10**9),
            GpuLost(now, topo.num_gpus),
            GpuRestored(now, -1),
            PipelineRegistered(now, _spec("dup-gpu", ClusterSpec(1, (0, 0)))),
            PipelineRegistered(now, _spec("tp-not-dividing", ClusterSpec(2, (0,)))),
        ]
        if now >= 1:
            bad.append(Tick(now - 1))
        bad.append(Tick(float("inf")))
        for decision in self.outstanding.values():  # reported applied before what it requires
            if any(r in self.outstanding for r in decision.requires):
                bad.append(DecisionApplied(now, decision.decision_id))
        if topo.num_nodes > 1:
            gpn = topo.gpus_per_node
            bad.append(PipelineRegistered(now, _spec(f"cross-{gpn}", ClusterSpec(2, (gpn - 1, gpn)))))
        for pid, pipeline in self.sched.pipelines.items():
            bad.append(PipelineRegistered(now, pipeline.spec))  # duplicate id
            bad.append(ClusterRequested(now, pid, "no_such_cluster", 1))
            bad.append(TrainStepFinished(now, pid, 0, None if pipeline.spec.adapters == () else pipeline.spec.adapters[0]))
            if not pipeline.admitted:
                bad.append(ClusterRequested(now, pid, "actor_train", 1))
            for cluster in pipeline.pending:
                bad.append(ClusterRequested(now, pid, cluster, 3))
            if pipeline.rolling:
                bad.append(RolloutProgressed(now, pid, -1))
                bad.append(RolloutProgressed(now, pid, 1e300))
            else:
                bad.append(RolloutProgressed(now, pid, 5))
                if pipeline.admitted and ROLLOUT_CLUSTER not in pipeline.pending:
                    bad.append(ClusterRequested(now, pid, ROLLOUT_CLUSTER, 6, 1e300))
                    bad.append(RequestWithdrawn(now, pid, ROLLOUT_CLUSTER))
            if "critic" not in pipeline.holdings:
                bad.append(ClusterReleased(now, pid, "critic"))
        return bad

    @invariant()
    def core_checked(self) -> None:
        # Every handle() ran the invariant checker; here only that time never went backwards.
        assert self.sched.now <= self.now or not hasattr(self, "sched")

    @invariant()
    def donor_orders_current(self) -> None:
        """A donor order the core keeps between rounds (PipelineState.donor_order_cache) is
        the one its pipeline's ranks give now: idle ranks in the order they joined, then,
        outside its tail or where it is not held (finishing together), busy ones by fewest
        trajectories in flight."""
        if not hasattr(self, "sched"):
            return
        for p in self.sched.pipelines.values():
            if p.donor_order_cache is None:
                continue
            counts = p.in_flight or {}
            idle = [r for n, r in p.active.items() if not counts.get(n)]
            busy = [r for n, r in p.active.items() if counts.get(n)]
            expected = idle if (p.in_tail and p.tail_held) or not busy else idle + sorted(busy, key=lambda r: counts[r.dp_rank])
            assert [r.dp_rank for r in p.donor_order_cache] == [r.dp_rank for r in expected]


def _spec(pid: str, rollout: ClusterSpec) -> PipelineSpec:
    return PipelineSpec(pid, PipelineKind.FULL_FINETUNE, {"actor_infer": rollout})


def _machine(policy: str) -> type[SchedulerMachine]:
    machine = type(f"Machine_{policy.replace('-', '_')}", (SchedulerMachine,), {"policy_name": policy})
    machine.TestCase.settings = settings(
        max_examples=EXAMPLES,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    return machine


TestRlix = _machine("rlix").TestCase
TestGapRatio = _machine("gap-ratio").TestCase
TestStatic = _machine("static").TestCase
TestSequential = _machine("sequential").TestCase
