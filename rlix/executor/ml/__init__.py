"""Machine-learning pieces the executor's actors call, written without Ray.

Each module does one job and is plain Python holding torch state; the Ray runtime wraps them
into actors:

- `tokenizer`, `tiny_model`: a byte-level tokenizer and a tiny Qwen2-style model built locally,
  saved and loaded through the normal `from_pretrained` path; `prepare_model` validates a model
  spec ("tiny" or a local path) before any actor starts.
- `registry`, `toy_tasks`: task and reward registries (custom pipelines plug in by decorator)
  and the bundled toy task whose reward visibly rises within a few GRPO steps on CPU.
- `batch`, `logprobs`, `algorithms`: padded token batches, token log-probs, and the RL maths
  (GRPO advantages, PPO clipped loss, GAE, value loss, k3 KL) as pure torch functions.
- `actor`, `critic`, `reference`, `lora`: the trainers (full-finetune actor, PPO critic, frozen
  reference, multi-LoRA over one shared frozen base).
- `rollout`: generation backends behind one interface (`hf` on transformers, `vllm` lazily).
- `local_loop`: one GRPO / PPO step wired from the pieces above in a single process: the
  reference wiring the Ray actors follow, and what the tests train with.

Nothing here imports torch at package import time except through the modules themselves, so
`rlix.executor.ml.registry` stays cheap to import.
"""
