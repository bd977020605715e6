"""Events and decisions to JSON-ready dicts and back: the format of a run's `events.jsonl`.

Every line of `events.jsonl` after the header is one event handed to the core and the
decisions it returned: `{"event": {...}, "decisions": [{...}, ...]}`. Each record names its
type (`"type": "ClusterRequested"`) and carries its fields as they are, tuples as lists, a
`PipelineRegistered` its whole spec. Replaying the events through a fresh core must give the
same decisions, field for field (`rlix.runs.replay`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rlix.policy import decisions as dec
from rlix.policy import events as ev
from rlix.policy.config import PolicyConfig
from rlix.policy.homes import with_mappings
from rlix.policy.specs import ClusterSpec, PipelineKind, PipelineSpec, Topology

EVENT_TYPES: dict[str, type[ev.Event]] = {
    cls.__name__: cls for cls in vars(ev).values()
    if isinstance(cls, type) and issubclass(cls, ev.Event) and cls is not ev.Event
}
DECISION_TYPES: dict[str, type[dec.Decision]] = {
    cls.__name__: cls for cls in vars(dec).values()
    if isinstance(cls, type) and issubclass(cls, dec.Decision) and cls is not dec.Decision
}
_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def spec_to_dict(spec: PipelineSpec) -> dict[str, Any]:
    """A spec as JSON-ready data; the home fields, the estimate, migration and the step counts
    only when set (older logs have none)."""
    out: dict[str, Any] = {
        "pipeline_id": spec.pipeline_id,
        "kind": spec.kind.value,
        "clusters": {name: _cluster_to_dict(c) for name, c in spec.clusters.items()},
        "adapters": list(spec.adapters),
        "max_staleness": spec.max_staleness,
        "weight": spec.weight,
    }
    if spec.home:
        out["home"] = list(spec.home)
    if spec.home_size:
        out["home_size"] = spec.home_size
    if spec.runtime_estimate_s is not None:
        out["runtime_estimate_s"] = spec.runtime_estimate_s
    if spec.rollout_migrates:
        out["rollout_migrates"] = True
    if spec.num_steps is not None:
        out["num_steps"] = spec.num_steps
    return out


def _cluster_to_dict(cluster: ClusterSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"tp": cluster.tp, "mapping": list(cluster.mapping)}
    if cluster.scope:
        out["scope"] = cluster.scope
    return out


def spec_from_dict(data: dict[str, Any]) -> PipelineSpec:
    return PipelineSpec(
        pipeline_id=data["pipeline_id"],
        kind=PipelineKind(data["kind"]),
        clusters={
            name: ClusterSpec(c["tp"], tuple(c["mapping"]), c.get("scope", ""))
            for name, c in data["clusters"].items()
        },
        adapters=tuple(data["adapters"]),
        max_staleness=data["max_staleness"],
        weight=data["weight"],
        home=tuple(data.get("home", ())),
        home_size=data.get("home_size", 0),
        runtime_estimate_s=data.get("runtime_estimate_s"),
        rollout_migrates=data.get("rollout_migrates", False),
        num_steps=data.get("num_steps"),
    )


def placed_spec(spec: PipelineSpec, place: dict[str, Any]) -> PipelineSpec:
    """`spec` after the recorded `Place` decision `place`."""
    return with_mappings(spec, place["home"], place["mappings"])


def encode(record: ev.Event | dec.Decision) -> dict[str, Any]:
    """One event or decision as a JSON-ready dict with its type name."""
    out: dict[str, Any] = {"type": type(record).__name__}
    for name in _fields(type(record)):
        value = getattr(record, name)
        out[name] = spec_to_dict(value) if isinstance(value, PipelineSpec) else _plain(value)
    return out


def decode_event(data: dict[str, Any]) -> ev.Event:
    cls = EVENT_TYPES.get(data.get("type", ""))
    if cls is None:
        raise ValueError(f"unknown event type {data.get('type')!r}")
    kwargs = {name: data[name] for name in _fields(cls) if name in data}
    if cls is ev.PipelineRegistered:
        kwargs["spec"] = spec_from_dict(kwargs["spec"])
    elif cls is ev.DecisionsApplied and isinstance(kwargs.get("decision_ids"), list):
        kwargs["decision_ids"] = tuple(kwargs["decision_ids"])
    return cls(**kwargs)


def header(topology: Topology, policy: str, config: PolicyConfig) -> dict[str, Any]:
    """The first line of `events.jsonl`: what a fresh core needs to replay the run."""
    return {
        "header": {
            "topology": {"num_nodes": topology.num_nodes, "gpus_per_node": topology.gpus_per_node},
            "policy": policy,
            "config": dataclasses.asdict(config),
        }
    }


def core_from_header(data: dict[str, Any]) -> tuple[Topology, str, PolicyConfig]:
    head = data["header"]
    topology = Topology(**head["topology"])
    return topology, head["policy"], PolicyConfig(**head["config"])
