"""An independent reading of the core's output: who holds which GPU, from the decisions alone.

The property tests (stateful, liveness) feed every accepted event and the decisions it led to
to `DecisionReplay`, which keeps its own map of GPU -> holder by the contract of
rlix.policy.decisions (a Grant or Expand takes its GPUs when emitted, a Shrink frees them when
emitted, a failure undoes its decision and, first, every decision in flight that required it;
a Revoke drops a holding and ends its latest decision in flight; removing a pipeline frees all
it held) and checks, its own way rather than through `rlix.policy.invariants`:

- GPU conservation: a Grant or Expand only takes GPUs that are free and not lost, a Shrink only
  frees its own rank's; and after every event the core's own owner table says the same;
- gang wholeness: a Grant is exactly its cluster's mapping, an Expand exactly its bundle
  (`mapping[r*tp:(r+1)*tp]`, sliced here), both from the spec as registered (or placed);
- the pacing bound: AllowRollout never passes the last version this model saw finished plus
  the adapter's max_staleness.

Any breach is an AssertionError naming the decision.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rlix.policy import decisions as dec
from rlix.policy import events as ev
from rlix.policy.core import Scheduler

#: A holder as the model names it: (pipeline, cluster, dp_rank), dp_rank -1 for a gang.
Holder = tuple[str, str, int]
ROLLOUT = "actor_infer"


class DecisionReplay:
    def __init__(self, num_gpus: int) -> None:
        self.num_gpus = num_gpus
        self.owner: dict[int, Holder] = {}
        self.offline: set[int] = set()
        self.inflight: dict[int, dec.Grant | dec.Expand | dec.Shrink] = {}
        self.latest: dict[Holder, int] = {}  # each holder's newest two-phase decision
        self.mappings: dict[str, dict[str, tuple[int, tuple[int, ...]]]] = {}  # pid -> cluster -> (tp, gpus)
        self.staleness: dict[str, int | dict[str, int]] = {}
        self.versions: dict[tuple[str, str], int] = {}

    # --- the event's own effect, before its round ---------------------------------------------

    def observe(self, event: ev.Event, decisions: Sequence[dec.Decision], sched: Scheduler | None = None) -> None:
        """One accepted event and the decisions of its round; with `sched`, compare owners."""
        self._apply_event(event)
        for decision in decisions:
            self._apply_decision(decision)
        if sched is not None:
            self.compare(sched)

    def _apply_event(self, event: ev.Event) -> None:
        if isinstance(event, ev.PipelineRegistered):
            spec = event.spec
            self.mappings[spec.pipeline_id] = {n: (c.tp, tuple(c.mapping)) for n, c in spec.clusters.items()}
            self.staleness[spec.pipeline_id] = spec.max_staleness
        elif isinstance(event, ev.PipelineRemoved):
            self._free_where(lambda h: h[0] == event.pipeline_id)
            for decision_id in [i for i, d in self.inflight.items() if d.pipeline_id == event.pipeline_id]:
                del self.inflight[decision_id]
        elif isinstance(event, ev.ClusterReleased | ev.ClusterReleasedAndRequested):
            # A gang (actor_infer too, when held whole at init) is freed at once; a rollout's
            # ranks are shrunk by the round ("release"), in the decisions.
            cluster = event.cluster if isinstance(event, ev.ClusterReleased) else event.released
            self._free_where(lambda h: h == (event.pipeline_id, cluster, -1))
        elif isinstance(event, ev.DecisionApplied):
            self.inflight.pop(event.decision_id, None)
        elif isinstance(event, ev.DecisionsApplied):
            for decision_id in event.decision_ids:
                self.inflight.pop(decision_id, None)
        elif isinstance(event, ev.DecisionFailed):
            self._fail(event.decision_id)
        elif isinstance(event, ev.GpuLost):
            self.offline.add(event.gpu)
        elif isinstance(event, ev.GpuRestored):
            self.offline.discard(event.gpu)
        elif isinstance(event, ev.TrainStepFinished):
            adapter = event.adapter if event.adapter is not None else "base"
            self.versions[(event.pipeline_id, adapter)] = event.version

    def _fail(self, decision_id: int) -> None:
        decision = self.inflight.pop(decision_id, None)
        if decision is None:
            return  # settled already (or ended by a Revoke): a repeated report changes nothing
        for other_id in sorted(self.inflight):
            other = self.inflight.get(other_id)
            if isinstance(other, dec.Grant | dec.Expand) and decision_id in other.requires:
                self._fail(other_id)  # what needed its GPUs gives them back first
        holder = self._holder(decision)
        if isinstance(decision, dec.Shrink):
            if not self.offline.intersection(decision.gpus):  # else the core revokes the rank
                self._take(holder, decision.gpus, decision)
        else:
            self._free_where(lambda h: h == holder)

    # --- the round's decisions ----------------------------------------------------------------

    def _apply_decision(self, decision: dec.Decision) -> None:
        if isinstance(decision, dec.Grant):
            tp_gpus = self.mappings[decision.pipeline_id][decision.cluster]
            assert decision.gpus == tp_gpus[1], f"{decision} is not its cluster's whole mapping {tp_gpus[1]}"
            self._start(decision)
        elif isinstance(decision, dec.Expand):
            tp, mapping = self.mappings[decision.pipeline_id][ROLLOUT]
            bundle = mapping[decision.dp_rank * tp:(decision.dp_rank + 1) * tp]
            assert decision.gpus == bundle and len(bundle) == tp, f"{decision} is not rank's bundle {bundle}"
            self._start(decision)
        elif isinstance(decision, dec.Shrink):
            holder = self._holder(decision)
            held = sorted(g for g, h in self.owner.items() if h == holder)
            assert held == sorted(decision.gpus), f"{decision} shrinks GPUs its rank does not hold ({held})"
            self._free_where(lambda h: h == holder)
            self.inflight[decision.decision_id] = decision
            self.latest[holder] = decision.decision_id
        elif isinstance(decision, dec.Revoke):
            holder = (decision.pipeline_id, decision.cluster, decision.dp_rank)
            self._free_where(lambda h: h == holder)
            self.inflight.pop(self.latest.get(holder, -1), None)
        elif isinstance(decision, dec.AllowRollout):
            self._check_pacing(decision)
        elif isinstance(decision, dec.Place):
            tps = self.mappings[decision.pipeline_id]
            for name, gpus in decision.mappings.items():
                tps[name] = (tps[name][0], tuple(gpus))

    def _start(self, decision: dec.Grant | dec.Expand) -> None:
        self._take(self._holder(decision), decision.gpus, decision)
        self.inflight[decision.decision_id] = decision
        self.latest[self._holder(decision)] = decision.decision_id

    def _take(self, holder: Holder, gpus: tuple[int, ...], why: dec.Decision) -> None:
        for gpu in gpus:
            assert gpu not in self.offline, f"{why} takes lost GPU {gpu}"
            assert gpu not in self.owner, f"{why} takes GPU {gpu}, held by {self.owner[gpu]}"
            self.owner[gpu] = holder

    def _check_pacing(self, allow: dec.AllowRollout) -> None:
        bound = self.staleness[allow.pipeline_id]
        k = bound[allow.adapter] if isinstance(bound, dict) else bound
        version = self.versions.get((allow.pipeline_id, allow.adapter), 0)
        assert allow.max_step <= version + k, f"{allow} passes version {version} + staleness {k}"

    @staticmethod
    def _holder(decision: dec.Grant | dec.Expand | dec.Shrink) -> Holder:
        if isinstance(decision, dec.Grant):
            return (decision.pipeline_id, decision.cluster, -1)
        return (decision.pipeline_id, ROLLOUT, decision.dp_rank)

    def _free_where(self, matches: Callable[[Holder], bool]) -> None:
        for gpu in [g for g, h in self.owner.items() if matches(h)]:
            del self.owner[gpu]

    # --- against the core's own table -----------------------------------------------------------

    def compare(self, sched: Scheduler) -> None:
        core: dict[int, Holder] = {}
        for gpu, holder in enumerate(sched.cluster.owner):
            if holder is not None:
                dp_rank = getattr(holder, "dp_rank", -1)
                core[gpu] = (holder.pipeline_id, getattr(holder, "cluster", ROLLOUT), dp_rank)
        assert core == self.owner, f"the core's owners {core} are not what its decisions said {self.owner}"
        num_free = self.num_gpus - len(self.offline | set(self.owner))
        assert sched.cluster.num_free == num_free, f"{sched.cluster.num_free} free, decisions leave {num_free}"
