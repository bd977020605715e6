"""The vllm rollout backend against the hf backend and the trainers.

Runs on a CUDA machine with vLLM installed, or on CPU with the third-party `vllm-cpu` build
when RLIX_TEST_VLLM_CPU=1 (opt-in: building an engine takes ~40 s of CPU there, and sleep mode
is GPU-only, so offload/load are exercised but free no memory). Skipped otherwise.

The CPU path was checked in a separate virtualenv (vllm-cpu 0.32.0, torch 2.13.0+cpu, its
CUDA torchvision/torchaudio/torchcodec removed): VLLM_ENABLE_V1_MULTIPROCESSING=0 keeps the
engine in-process, as a Ray actor would hold it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ON_CPU = os.environ.get("RLIX_TEST_VLLM_CPU") == "1"
if not ON_CPU and not torch.cuda.is_available():
    pytest.skip(
        "vllm backend: needs CUDA, or RLIX_TEST_VLLM_CPU=1 with vllm-cpu", allow_module_level=True
    )
pytest.importorskip("vllm")
pytest.importorskip("peft")

from rlix.executor.ml.actor import ActorTrainer  # noqa: E402
from rlix.executor.ml.batch import build_batch  # noqa: E402
from rlix.executor.ml.lora import (  # noqa: E402
    ATTENTION_MODULES,
    LoraSettings,
    MultiLoraTrainer,
)
from rlix.executor.ml.rollout import make_backend  # noqa: E402
from rlix.executor.ml.rollout.base import (  # noqa: E402
    FinishReason,
    GenerationRequest,
    RolloutBackend,
    SamplingParams,
    resume_request,
)

GREEDY = SamplingParams(temperature=0.0)
PROMPT = tuple(b"say a:")


@pytest.fixture(scope="module")
def backend(
    tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RolloutBackend]:
    if ON_CPU:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        options = {"dtype": "float32", "enforce_eager": True}
    else:
        options = {"dtype": "float32", "gpu_memory_utilization": 0.3}
    rollout = make_backend(
        "vllm",
        str(tiny_model_path),
        chunk_tokens=4,
        enable_lora=True,
        max_lora_rank=8,
        max_loras=2,
        workdir=tmp_path_factory.mktemp("vllm"),
        max_model_len=256,
        seed=0,
        **options,
    )
    rollout.load()
    yield rollout
    rollout.shutdown()  # type: ignore[attr-defined]


def requests(max_new_tokens: int) -> list[GenerationRequest]:
    return [
        GenerationRequest("short", PROMPT, max_new_tokens, sampling=GREEDY),
        GenerationRequest("long", tuple(b"please, say c now:"), max_new_tokens, sampling=GREEDY),
    ]


def replay_log_probs(log_probs_fn, tokens: tuple[int, ...]) -> list[float]:  # type: ignore[no-untyped-def]
    batch = build_batch([list(PROMPT)], [list(tokens)], pad_token_id=257)
    return log_probs_fn(batch)[0, len(PROMPT) :].tolist()


def test_generation_matches_hf_and_resumes(backend: RolloutBackend, tiny_model_path: Path) -> None:
    hf = make_backend("hf", str(tiny_model_path), chunk_tokens=16)
    hf.load()
    expected = hf.generate(requests(10))
    got = backend.generate(requests(10))
    for a, b in zip(expected, got, strict=True):
        assert a.token_ids == b.token_ids and b.finish_reason is FinishReason.LENGTH
        assert list(b.log_probs) == pytest.approx(list(a.log_probs), abs=1e-3)
    num_checks = 0

    def stop_after_one_chunk() -> bool:
        nonlocal num_checks
        num_checks += 1
        return num_checks > 1

    partial = backend.generate(requests(10), should_stop=stop_after_one_chunk)
    assert [len(c.token_ids) for c in partial] == [4, 4] and not partial[0].finished
    resumed = backend.generate(
        [resume_request(r, c) for r, c in zip(requests(10), partial, strict=True)]
    )
    assert [c.token_ids for c in resumed] == [c.token_ids for c in got]
    assert all(c.num_prefix_tokens == 4 for c in resumed)


def test_lora_adapter_requests_and_in_place_refresh(
    backend: RolloutBackend, tiny_model_path: Path
) -> None:
    trainer = MultiLoraTrainer(
        tiny_model_path, ["beta"], lr=1e-2, lora=LoraSettings(target_modules=ATTENTION_MODULES)
    )
    batch = build_batch([list(PROMPT)] * 2, [list(b"aaab"), list(b"xyz")], pad_token_id=257)
    for expected_version in (2, 4):
        for _ in range(2):
            old = trainer.old_log_probs("beta", batch)
            trainer.train_step("beta", batch, torch.tensor([1.0, -1.0]), old)
        backend.update_adapter(trainer.adapter_state("beta"))
        lora, base = backend.generate(
            [
                GenerationRequest("lora", PROMPT, 6, adapter="beta", sampling=GREEDY),
                GenerationRequest("base", PROMPT, 6, sampling=GREEDY),
            ]
        )
        assert lora.weight_version == expected_version
        expected = replay_log_probs(lambda b: trainer.old_log_probs("beta", b), lora.token_ids)
        assert list(lora.log_probs) == pytest.approx(expected, abs=1e-3)
        base_expected = replay_log_probs(trainer.reference_log_probs, base.token_ids)
        assert list(base.log_probs) == pytest.approx(base_expected, abs=1e-3)


def test_full_weight_update_in_place_and_offload(
    backend: RolloutBackend, tiny_model_path: Path
) -> None:
    actor = ActorTrainer(tiny_model_path, lr=1e-2)
    batch = build_batch([list(PROMPT)] * 2, [list(b"aaab"), list(b"xyz")], pad_token_id=257)
    [before] = backend.generate([GenerationRequest("r", PROMPT, 6, sampling=GREEDY)])
    for _ in range(2):
        actor.train_step(batch, torch.tensor([1.0, -1.0]), actor.old_log_probs(batch))
    backend.update_weights(actor.state_dict_for_inference())
    [updated] = backend.generate([GenerationRequest("r", PROMPT, 6, sampling=GREEDY)])
    assert updated.weight_version == 2 and before.weight_version == 0
    assert list(updated.log_probs) != pytest.approx(list(before.log_probs), abs=1e-3)
    assert list(updated.log_probs) == pytest.approx(
        replay_log_probs(actor.old_log_probs, updated.token_ids), abs=1e-3
    )
    backend.offload()
    assert not backend.is_loaded
    with pytest.raises(RuntimeError, match="offloaded"):
        backend.generate([GenerationRequest("r", PROMPT, 2, sampling=GREEDY)])
    backend.load()
    [again] = backend.generate([GenerationRequest("r", PROMPT, 6, sampling=GREEDY)])
    assert again.token_ids == updated.token_ids and again.weight_version == 2
