"""Two custom pipelines sharing GPUs under rlix's executor, without touching rlix.

1. A pipeline that follows rlix's GRPO step (the shared program) with its own task and reward,
   plugged in with the registry decorators: it trains the tiny Qwen2 model on CPU.
2. An external pipeline that drives the scheduler itself, RLix style: allocate an id, register,
   admit, then request and release clusters; its rollout ranks are started and stopped through
   a handler actor (`RankHandler`), which is where a real pipeline would wake and sleep its
   inference engines.

Both run on 2 declared GPUs of a local Ray session (loopback only). Run it with

    .venv/bin/python examples/custom_pipeline.py
"""

from __future__ import annotations

import random
import time

import ray

import rlix
from rlix.executor.api import RankHandler, ml_pipeline
from rlix.executor.ml.registry import Prompt, register_reward, register_task
from rlix.policy import ClusterSpec, PipelineKind, PipelineSpec


@register_task("say_ab")
class SayAb:
    """Prompts "say a:" or "say b:"; the model should answer with that letter."""

    default_reward = "ab_share"

    def sample_prompts(self, num_prompts: int, rng: random.Random) -> list[Prompt]:
        letters = [rng.choice("ab") for _ in range(num_prompts)]
        return [Prompt(f"say {letter}:", {"letter": letter}) for letter in letters]


@register_reward("ab_share")
def ab_share(prompt: Prompt, response: str) -> float:
    """Closeness of each response character to the asked letter (0..1)."""
    target = ord(prompt.metadata["letter"])
    return sum(max(0.0, 1 - abs(ord(c) - target) / 32) for c in response) / len(response) if response else 0.0


@ray.remote(num_cpus=0)
class LoggingHandler(RankHandler):
    """Called by the orchestrator to carry out the core's rollout decisions for pipeline 2."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[str] = []

    async def on_expand(self, dp_rank: int, gpus: tuple[int, ...]) -> None:
        self.log.append(f"expand rank {dp_rank} on GPUs {list(gpus)}")  # load weights here

    async def on_shrink(self, dp_rank: int, gpus: tuple[int, ...], reason: str) -> None:
        self.log.append(f"shrink rank {dp_rank} ({reason})")  # stop, re-queue, drop weights here

    def history(self) -> list[str]:
        return list(self.log)


def main() -> None:
    client = rlix.init(num_gpus=2)

    # 1. The shared GRPO program with a custom task and reward.
    client.launch(ml_pipeline("say-ab", rollout_gpus=(0, 1), train_gpus=(0,), task="say_ab", steps=4,
                              actor_lr=1e-2, max_new_tokens=8))

    # 2. An external pipeline driving the scheduler by hand.
    handler = LoggingHandler.remote()
    pid = client.allocate_pipeline_id("external")
    spec = PipelineSpec(pid, PipelineKind.FULL_FINETUNE,
                        {"actor_infer": ClusterSpec(1, (0, 1)), "actor_train": ClusterSpec(1, (1,))})
    client.register_pipeline(spec, handler)
    client.admit_pipeline(pid)
    for step in range(2):
        gpus = client.request(pid, "actor_train", 1)  # blocks until granted
        print(f"{pid}: training step {step} on GPUs {gpus}")
        time.sleep(0.5)  # the training work
        client.release_and_request(pid, "actor_train", "actor_infer", 6, estimate=16.0)
        for remaining in (12.0, 6.0, 0.0):  # the rollout work, reported as it goes
            time.sleep(0.5)
            client.progress(pid, remaining)
        client.release(pid, "actor_infer")
        client.train_step_finished(pid, step + 1)
    client.remove_pipeline(pid)
    print("\n".join(f"  handler: {line}" for line in ray.get(handler.history.remote())))

    status = client.wait_done(timeout_s=900)
    print({p: s["status"] for p, s in status.items()})
    rewards = [row["reward_mean"] for row in ray.get(client.handle.tables.remote(["say-ab"]))["steps"]]
    print("say-ab reward per step:", [round(r, 3) for r in rewards])
    # The run's folder, as `rlix-exec run` writes one: `rlix-sim check` / `replay` / `jobs` read it.
    print("run folder:", client.write_run("runs/custom_pipeline", overwrite=True))


if __name__ == "__main__":
    main()
