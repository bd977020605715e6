"""The hf rollout backend: chunking, interruption and resume, weights, versions, offload."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rlix.executor.ml.rollout import make_backend  # noqa: E402
from rlix.executor.ml.rollout.base import (  # noqa: E402
    FinishReason,
    FullWeights,
    GenerationRequest,
    SamplingParams,
    resume_request,
)
from rlix.executor.ml.rollout.hf import HfBackend  # noqa: E402
from rlix.executor.ml.tiny_model import load_causal_lm  # noqa: E402
from rlix.executor.ml.tokenizer import EOS_TOKEN_ID  # noqa: E402
from tests.executor.child_env import printed_by_a_fresh_interpreter  # noqa: E402

GREEDY = SamplingParams(temperature=0.0)


def requests(max_new_tokens: int, sampling: SamplingParams = GREEDY) -> list[GenerationRequest]:
    # Different prompt lengths, so rows are left-padded differently.
    return [
        GenerationRequest("short", tuple(b"say a:"), max_new_tokens, sampling=sampling),
        GenerationRequest("long", tuple(b"please, say c now:"), max_new_tokens, sampling=sampling),
    ]


def test_chunking_does_not_change_greedy_output(tiny_model_path: Path) -> None:
    one_chunk = make_backend("hf", str(tiny_model_path), chunk_tokens=64)
    small_chunks = make_backend("hf", str(tiny_model_path), chunk_tokens=3)
    one_chunk.load()
    small_chunks.load()
    a = one_chunk.generate(requests(10))
    b = small_chunks.generate(requests(10))
    for x, y in zip(a, b, strict=True):
        assert x.token_ids == y.token_ids and len(x.token_ids) == 10
        assert x.log_probs == pytest.approx(y.log_probs, abs=1e-4)
        assert x.finish_reason is FinishReason.LENGTH and x.weight_version == 0
    # A row generated alone equals the same row generated in a padded batch.
    [alone] = one_chunk.generate(requests(10)[1:])
    assert alone.token_ids == a[1].token_ids


def test_interrupted_generation_returns_prefixes_and_resumes(tiny_model_path: Path) -> None:
    backend = HfBackend(tiny_model_path, chunk_tokens=4)
    backend.load()
    [reference] = backend.generate(requests(12)[:1])
    num_chunks = 0

    def stop_after_one_chunk() -> bool:
        nonlocal num_chunks
        num_chunks += 1
        return num_chunks > 1

    partial = backend.generate(requests(12), should_stop=stop_after_one_chunk)
    assert [c.finish_reason for c in partial] == [FinishReason.INTERRUPTED] * 2
    assert [len(c.token_ids) for c in partial] == [4, 4] and not partial[0].finished
    resumed_requests = [resume_request(r, c) for r, c in zip(requests(12), partial, strict=True)]
    resumed = backend.generate(resumed_requests)
    for before, after in zip(partial, resumed, strict=True):
        assert after.finished and len(after.token_ids) == 12
        assert after.token_ids[:4] == before.token_ids  # the prefix is kept, not regenerated
        assert after.log_probs[:4] == before.log_probs
        assert after.num_prefix_tokens == 4
    # Greedy: interrupted and resumed equals generated in one go.
    assert resumed[0].token_ids == reference.token_ids
    with pytest.raises(ValueError, match="resume_request"):
        resume_request(requests(12)[0], partial[1])


def test_interrupt_from_another_thread_is_sticky_until_load(tiny_model_path: Path) -> None:
    backend = HfBackend(tiny_model_path, chunk_tokens=2)
    backend.load()
    first_chunk_done = threading.Event()
    interrupt_sent = threading.Event()
    num_checks = 0

    def note_progress() -> bool:
        # Holds the worker after its first chunk until the interrupt is sent, so the test
        # does not depend on thread timing: exactly one more chunk runs before it stops.
        nonlocal num_checks
        num_checks += 1
        if num_checks > 1:
            first_chunk_done.set()
            interrupt_sent.wait(timeout=60)
        return False

    results: list[list] = []  # type: ignore[type-arg]
    worker = threading.Thread(
        target=lambda: results.append(backend.generate(requests(40), should_stop=note_progress))
    )
    worker.start()
    assert first_chunk_done.wait(timeout=60)
    backend.interrupt()
    interrupt_sent.set()
    worker.join(timeout=60)
    [partial] = results
    assert all(c.finish_reason is FinishReason.INTERRUPTED for c in partial)
    assert [len(c.token_ids) for c in partial] == [4, 4]
    # Still interrupted: a new call returns at once with the prefixes unchanged.
    again = backend.generate(
        [resume_request(r, c) for r, c in zip(requests(40), partial, strict=True)]
    )
    assert [c.token_ids for c in again] == [c.token_ids for c in partial]
    backend.load()  # an expand clears the interrupt
    done = backend.generate(
        [resume_request(r, c) for r, c in zip(requests(40), partial, strict=True)]
    )
    assert all(c.finished for c in done)


def test_end_of_sequence_stops_a_row(tiny_model_path: Path) -> None:
    backend = HfBackend(tiny_model_path, chunk_tokens=4)
    backend.load()
    prompt = tuple(b"say b")
    [first] = backend.generate([GenerationRequest("r", prompt, 1, sampling=GREEDY)])
    favourite = first.token_ids[0]
    assert favourite != EOS_TOKEN_ID
    # Make end-of-sequence's (tied) embedding row twice the favourite's: the prompt's hidden
    # states are unchanged (it has no end-of-sequence token) and the favourite's winning logit
    # doubles for end-of-sequence, so greedy now stops at once.
    model = load_causal_lm(tiny_model_path)
    state = {name: t.clone() for name, t in model.state_dict().items()}
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        if name in state:
            state[name][EOS_TOKEN_ID] = 2.0 * state[name][favourite]
    backend.update_weights(FullWeights(5, state))
    [stopped] = backend.generate([GenerationRequest("r", prompt, 8, sampling=GREEDY)])
    assert stopped.token_ids == (EOS_TOKEN_ID,)
    assert stopped.finish_reason is FinishReason.STOP and stopped.weight_version == 5
    # A resumed request whose prefix already ended is complete without generating.
    [done] = backend.generate(
        [GenerationRequest("r", prompt, 8, prefix_token_ids=(97, EOS_TOKEN_ID), sampling=GREEDY)]
    )
    assert done.token_ids == (97, EOS_TOKEN_ID) and done.finish_reason is FinishReason.STOP


def test_weights_versions_and_offload(tiny_model_path: Path) -> None:
    backend = HfBackend(tiny_model_path, chunk_tokens=8)
    assert not backend.is_loaded
    with pytest.raises(RuntimeError, match="offloaded"):
        backend.generate(requests(4))
    backend.load()
    base = backend.generate(requests(6))
    model = load_causal_lm(tiny_model_path)
    changed = {name: t + 0.01 * torch.randn_like(t) for name, t in model.state_dict().items()}
    backend.update_weights(FullWeights(3, changed))
    assert backend.weight_version() == 3
    updated = backend.generate(requests(6))
    assert all(c.weight_version == 3 for c in updated)
    assert [c.log_probs for c in updated] != [c.log_probs for c in base]
    backend.offload()
    assert not backend.is_loaded
    with pytest.raises(RuntimeError, match="update_weights on an offloaded rank"):
        backend.update_weights(FullWeights(4, changed))
    backend.load()  # the newest weights it was given come back
    assert backend.weight_version() == 4
    again = backend.generate(requests(6))
    for before, after in zip(updated, again, strict=True):
        assert after.log_probs == pytest.approx(before.log_probs)


def test_bad_requests_are_refused(tiny_model_path: Path) -> None:
    with pytest.raises(ValueError, match="empty prompt_token_ids"):
        GenerationRequest("r", (), 4)
    with pytest.raises(ValueError, match="exceeds max_new_tokens"):
        GenerationRequest("r", (1,), 2, prefix_token_ids=(1, 2, 3))
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError, match="unknown rollout backend 'sglang'"):
        make_backend("sglang", str(tiny_model_path))
    backend = HfBackend(tiny_model_path)
    backend.load()
    with pytest.raises(ValueError, match="unknown adapter 'nope'; loaded adapters: none"):
        backend.generate([GenerationRequest("r", (1,), 2, adapter="nope")])


def test_adapters_need_enable_lora(tiny_model_path: Path) -> None:
    from rlix.executor.ml.lora import MultiLoraTrainer

    trainer = MultiLoraTrainer(tiny_model_path, ["alpha"], lr=1e-2)
    with pytest.raises(RuntimeError, match="without enable_lora=True"):
        HfBackend(tiny_model_path).update_adapter(trainer.adapter_state("alpha"))


def test_a_full_finetune_engine_never_imports_peft(tiny_model_path: Path) -> None:
    """A full-finetune pipeline's rollout worker starts without peft (seconds of its start on a
    CPU machine); a multi-LoRA one imports it as it starts. A fresh interpreter, so nothing the
    test session imported counts."""
    script = (
        "import sys\n"
        "from rlix.executor.ml_workload import MlEngine, DEFAULTS\n"
        f"params = {{**DEFAULTS, 'model_path': {str(tiny_model_path)!r}, 'device': 'cpu'}}\n"
        "engine = MlEngine(params, lora=False)\n"
        "engine.backend.load()\n"
        "print('peft' in sys.modules)\n"
        "MlEngine(params, lora=True)\n"
        "print('peft' in sys.modules)\n"
    )
    assert printed_by_a_fresh_interpreter(script) == ["False", "True"]
