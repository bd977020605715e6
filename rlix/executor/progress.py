"""Progress bars of a run: one tqdm bar per pipeline (train steps done, last mean reward)."""

from __future__ import annotations

from typing import Any

from rlix.executor.workload import PipelineSetup


class Progress:
    def __init__(self, setups: list[PipelineSetup], quiet: bool) -> None:
        self.bars: dict[str, Any] = {}
        if quiet:
            return
        from tqdm import tqdm

        width = max(len(s.pipeline_id) for s in setups)
        for position, setup in enumerate(setups):
            total = sum(a.num_steps for a in setup.program.adapters)
            self.bars[setup.pipeline_id] = tqdm(total=total, desc=setup.pipeline_id.ljust(width),
                                                position=position, unit="step", leave=True)

    def update(self, snapshot: dict[str, Any]) -> None:
        for pid, bar in self.bars.items():
            done = snapshot["steps"].get(pid, 0)
            if done > bar.n:
                bar.update(done - bar.n)
            status = snapshot["pipelines"].get(pid, {}).get("status", "waiting")
            reward = snapshot["reward"].get(pid)
            postfix = status if reward is None else f"{status}, reward {reward:.3f}"
            if bar.postfix != postfix:
                bar.set_postfix_str(postfix)

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()
