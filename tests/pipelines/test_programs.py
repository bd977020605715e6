"""The pipeline programs yield the step sequence of DESIGN.md, checked by hand, op by op."""

from __future__ import annotations

from typing import Any

from rlix.pipelines import AdapterConfig, ProgramConfig, ops, program_for
from rlix.policy.specs import PipelineKind, Priority


def trace(program: Any, answers: dict[type, Any] | None = None, limit: int = 200) -> list[Any]:
    """Run a program thread alone, answering each op plainly; forks are recorded, not run."""
    seen: list[Any] = []
    value: Any = None
    for _ in range(limit):
        try:
            op = program.send(value)
        except StopIteration:
            return seen
        seen.append(op)
        value = (answers or {}).get(type(op))
        if isinstance(op, ops.AwaitAnyBatch):
            value = op.keys[0]
    raise AssertionError("program did not finish")


def test_ppo_with_kl_step_follows_the_priority_order() -> None:
    config = ProgramConfig("p", PipelineKind.FULL_FINETUNE, (AdapterConfig("base", 1, 0),), 4, 2,
                           has_critic=True, has_reference=True)
    main = trace(program_for(config))
    requests = [(op.cluster, op.priority) for op in main if isinstance(op, ops.Request)]
    assert requests == [
        ("actor_train", Priority.INIT), ("critic", Priority.INIT), ("reference", Priority.INIT),
        ("critic", Priority.VALUE), ("actor_train", Priority.OLD_LOG_PROBS),
        ("reference", Priority.REF_LOG_PROBS), ("critic", Priority.CRITIC_TRAIN),
        ("actor_train", Priority.ACTOR_TRAIN),
    ]
    stages = [op.stage for op in main if isinstance(op, ops.Stage) and op.step == 0]
    assert stages == ["values", "old_log_probs", "ref_log_probs", "critic_train", "actor_train"]
    assert isinstance(main[-1], ops.Publish) and main[-1].version == 1
    # Each stage releases its cluster right after it.
    for i, op in enumerate(main):
        if isinstance(op, ops.Stage):
            assert main[i + 1] == ops.Release(op.cluster)


def test_producer_paces_every_step_before_submitting_it() -> None:
    config = ProgramConfig("p", PipelineKind.FULL_FINETUNE, (AdapterConfig("base", 3, 1),), 4, 2)
    main = trace(program_for(config))
    (fork,) = [op for op in main if isinstance(op, ops.Fork)]
    produced = trace(fork.program)
    assert produced == [x for s in range(3) for x in (ops.AwaitAllowed("base", s), ops.Generate("base", s, 4, 2))]


def test_multi_lora_trains_the_adapter_whose_batch_is_ready() -> None:
    adapters = (AdapterConfig("a", 2, 0), AdapterConfig("b", 1, 1))
    config = ProgramConfig("m", PipelineKind.MULTI_LORA, adapters, 2, 2)
    main = trace(program_for(config))
    forks = [op for op in main if isinstance(op, ops.Fork)]
    assert len(forks) == 2
    waits = [op.keys for op in main if isinstance(op, ops.AwaitAnyBatch)]
    # Answered with the first key each time: a0, a1 (b waits), then b0.
    assert waits == [(("a", 0), ("b", 0)), (("a", 1), ("b", 0)), (("b", 0),)]
    published = [(op.adapter, op.version) for op in main if isinstance(op, ops.Publish)]
    assert published == [("a", 1), ("a", 2), ("b", 1)]
    assert not any(isinstance(op, ops.Request) and op.cluster == "critic" for op in main)


def test_checkpoints_come_every_n_steps_of_each_adapter_before_the_publish() -> None:
    config = ProgramConfig("p", PipelineKind.FULL_FINETUNE, (AdapterConfig("base", 5, 0),), 4, 2, checkpoint_every=2)
    main = trace(program_for(config))
    assert [op.version for op in main if isinstance(op, ops.Checkpoint)] == [2, 4]
    for i, op in enumerate(main):
        if isinstance(op, ops.Checkpoint):  # after the step's training, before its publish
            assert main[i - 1] == ops.Release("actor_train") and main[i + 1] == ops.Publish("base", op.version)
    lora = ProgramConfig("m", PipelineKind.MULTI_LORA, (AdapterConfig("a", 3, 0), AdapterConfig("b", 2, 1)), 2, 2,
                         checkpoint_every=2)
    saved = [(op.adapter, op.version) for op in trace(program_for(lora)) if isinstance(op, ops.Checkpoint)]
    assert sorted(saved) == [("a", 2), ("b", 2)]
    never = ProgramConfig("p", PipelineKind.FULL_FINETUNE, (AdapterConfig("base", 5, 0),), 4, 2)
    assert not any(isinstance(op, ops.Checkpoint) for op in trace(program_for(never)))


def test_a_resumed_program_starts_each_adapter_at_its_first_step() -> None:
    config = ProgramConfig("p", PipelineKind.FULL_FINETUNE, (AdapterConfig("base", 5, 1),), 4, 2,
                           start_steps=(("base", 3),))
    main = trace(program_for(config))
    assert [op.stage for op in main if isinstance(op, ops.Stage)][:1] == ["init"]  # models load first
    assert [op.step for op in main if isinstance(op, ops.AwaitBatch)] == [3, 4]
    assert [op.version for op in main if isinstance(op, ops.Publish)] == [4, 5]
    (fork,) = [op for op in main if isinstance(op, ops.Fork)]
    assert [op.step for op in trace(fork.program) if isinstance(op, ops.Generate)] == [3, 4]
    lora = ProgramConfig("m", PipelineKind.MULTI_LORA, (AdapterConfig("a", 3, 0), AdapterConfig("b", 2, 0)), 2, 2,
                         start_steps=(("a", 2),))
    published = [(op.adapter, op.version) for op in trace(program_for(lora)) if isinstance(op, ops.Publish)]
    assert sorted(published) == [("a", 3), ("b", 1), ("b", 2)]


def test_a_program_resumed_past_its_last_step_is_empty() -> None:
    """Nothing left to train: no init (no GPU held, no model loaded), no rollout."""
    done = ProgramConfig("p", PipelineKind.FULL_FINETUNE, (AdapterConfig("base", 4, 1),), 4, 2,
                         has_critic=True, start_steps=(("base", 4),))
    assert done.finished and trace(program_for(done)) == []
    lora = (AdapterConfig("a", 3, 0), AdapterConfig("b", 2, 0))
    both = ProgramConfig("m", PipelineKind.MULTI_LORA, lora, 2, 2, start_steps=(("a", 3), ("b", 2)))
    assert both.finished and trace(program_for(both)) == []
    one_left = ProgramConfig("m", PipelineKind.MULTI_LORA, lora, 2, 2, start_steps=(("a", 3), ("b", 1)))
    assert not one_left.finished
    published = [(op.adapter, op.version) for op in trace(program_for(one_left)) if isinstance(op, ops.Publish)]
    assert published == [("b", 2)]
    assert not ProgramConfig("f", PipelineKind.FULL_FINETUNE, (AdapterConfig("base", 4, 1),), 4, 2).finished


def test_a_prefetching_program_reads_every_init_cluster_before_it_asks_for_gpus() -> None:
    config = ProgramConfig("p", PipelineKind.FULL_FINETUNE, (AdapterConfig("base", 1, 0),), 4, 2,
                           has_critic=True, prefetch_weights=True)
    main = trace(program_for(config))
    first_request = next(i for i, op in enumerate(main) if isinstance(op, ops.Request))
    assert main[:first_request] == [ops.AwaitPlaced(), ops.Prefetch("actor_train"), ops.Prefetch("critic")]
    # Then the inits as without prefetching, one cluster at a time.
    assert main[first_request:first_request + 6] == [
        ops.Request("actor_train", Priority.INIT), ops.Stage("init", "actor_train", "", -1), ops.Release("actor_train"),
        ops.Request("critic", Priority.INIT), ops.Stage("init", "critic", "", -1), ops.Release("critic"),
    ]


def test_a_program_that_does_not_prefetch_asks_for_its_init_first() -> None:
    for kind, adapters in ((PipelineKind.FULL_FINETUNE, (AdapterConfig("base", 1, 0),)),
                           (PipelineKind.MULTI_LORA, (AdapterConfig("a", 1, 0),))):
        main = trace(program_for(ProgramConfig("p", kind, adapters, 2, 2)))
        assert main[0] == ops.Request("actor_train", Priority.INIT)
        assert not [op for op in main if isinstance(op, ops.Prefetch | ops.AwaitPlaced)]
    lora = trace(program_for(ProgramConfig("m", PipelineKind.MULTI_LORA, (AdapterConfig("a", 1, 0),), 2, 2,
                                           prefetch_weights=True)))
    assert lora[:3] == [ops.AwaitPlaced(), ops.Prefetch("actor_train"), ops.Request("actor_train", Priority.INIT)]
