"""Spec validation: every bad field is a typed error that names the field and the value."""

from __future__ import annotations

import pytest

from rlix.policy import (
    ClusterSpec,
    PipelineKind,
    PipelineRegistered,
    PipelineSpec,
    Scheduler,
    SpecError,
    Topology,
)
from tests.policy.builders import full_finetune, multi_lora

TOPO = Topology(2, 4)


@pytest.mark.parametrize(
    ("spec", "field", "value"),
    [
        (full_finetune("a", (0, 0), (1,)), "a.clusters.actor_infer.mapping", 0),
        (full_finetune("a", (0, 1, 2), (1,), tp=2), "a.clusters.actor_infer.tp", 2),
        (full_finetune("a", (2, 3, 4, 5), (1,), tp=4), "a.clusters.actor_infer.mapping", (2, 3, 4, 5)),
        (full_finetune("a", (0, 8), (1,)), "a.clusters.actor_infer.mapping", 8),
        (full_finetune("a", (0,), (1,), tp=0), "a.clusters.actor_infer.tp", 0),
        (full_finetune("a", (), (1,)), "a.clusters.actor_infer.mapping", ()),
        (full_finetune("a", (0,), (1,), max_staleness=-1), "a.max_staleness", -1),
        (multi_lora("a", (0,), (1,), adapters=()), "a.adapters", ()),
        (multi_lora("a", (0,), (1,), adapters=("x", "x")), "a.adapters", ("x", "x")),
        (multi_lora("a", (0,), (1,), max_staleness={"a0": 1}), "a.max_staleness", {"a0": 1}),
        (full_finetune("", (0,), (1,)), "pipeline_id", ""),
        (PipelineSpec("a", PipelineKind.FULL_FINETUNE, {"actor_train": ClusterSpec(1, (0,))}), "a.clusters", ["actor_train"]),
        (PipelineSpec("a", PipelineKind.FULL_FINETUNE, {"actor_infer": ClusterSpec(1, (0,)), "judge": ClusterSpec(1, (1,))}), "a.clusters", "judge"),
        (PipelineSpec("a", PipelineKind.FULL_FINETUNE, {"actor_infer": ClusterSpec(1, (0,))}, weight=0.0), "a.weight", 0.0),
        (PipelineSpec("a", PipelineKind.FULL_FINETUNE, {"actor_infer": ClusterSpec(1, (0,))}, adapters=("x",)), "a.adapters", ("x",)),
    ],
)
def test_bad_spec_names_field_and_value(spec: PipelineSpec, field: str, value: object) -> None:
    sched = Scheduler(TOPO)
    with pytest.raises(SpecError) as info:
        sched.handle(PipelineRegistered(0.0, spec))
    assert info.value.field == field
    assert info.value.value == value
    assert repr(value) in str(info.value)
    assert not sched.pipelines


def test_bad_topology() -> None:
    with pytest.raises(SpecError, match="topology.gpus_per_node"):
        Scheduler(Topology(1, 0))


def test_unknown_policy() -> None:
    with pytest.raises(SpecError, match="unknown policy"):
        Scheduler(TOPO, "fastest")


def test_valid_specs_register() -> None:
    sched = Scheduler(TOPO)
    sched.handle(PipelineRegistered(0.0, full_finetune("a", (0, 1, 2, 3, 4, 5, 6, 7), (0, 1), tp=4)))
    sched.handle(PipelineRegistered(0.0, multi_lora("b", (4, 5), (6,), max_staleness={"a0": 0, "a1": 2})))
    assert [len(p.ranks) for p in sched.pipelines.values()] == [2, 2]


def test_only_rlix_prefetches_weights_and_the_setting_turns_it_off() -> None:
    from rlix.policy import POLICIES, PolicyConfig

    on, off = PolicyConfig(), PolicyConfig(prefetch_weights=False)
    assert {name for name, cls in POLICIES.items() if cls.prefetches(on)} == {"rlix"}
    assert not any(cls.prefetches(off) for cls in POLICIES.values())
    with pytest.raises(SpecError, match="config.prefetch_weights"):
        Scheduler(TOPO, "rlix", PolicyConfig(prefetch_weights=1))  # type: ignore[arg-type]
