"""Progress of a run: one tqdm bar per pipeline (train steps done, last mean reward) on a
terminal; one plain line per change where stderr is not one (a log file, `nohup`, a batch
job's output), as every command's progress does (rlix.runs.progress)."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from rlix.executor.workload import PipelineSetup
from rlix.runs.progress import is_terminal


class Progress:
    def __init__(self, setups: list[PipelineSetup], quiet: bool, stream: TextIO | None = None) -> None:
        self.bars: dict[str, Any] = {}
        self.stream = sys.stderr if stream is None else stream
        self.totals = {s.pipeline_id: sum(a.num_steps for a in s.program.adapters) for s in setups}
        self.width = max((len(pid) for pid in self.totals), default=0)
        #: Line mode: what each pipeline's last line said, so a line is written only on a change.
        self.said: dict[str, str] = {}
        self.lines = not quiet and not is_terminal(self.stream)
        self.start_s = time.monotonic()
        if quiet or self.lines:
            return
        from tqdm import tqdm

        for position, (pid, total) in enumerate(self.totals.items()):
            self.bars[pid] = tqdm(total=total, desc=pid.ljust(self.width), position=position, unit="step",
                                  leave=True, file=self.stream)

    def update(self, snapshot: dict[str, Any]) -> None:
        if self.lines:
            self._write_lines(snapshot)
            return
        for pid, bar in self.bars.items():
            done = snapshot["steps"].get(pid, 0)
            if done > bar.n:
                bar.update(done - bar.n)
            postfix = _status(snapshot, pid)
            if bar.postfix != postfix:
                bar.set_postfix_str(postfix)

    def _write_lines(self, snapshot: dict[str, Any]) -> None:
        for pid, total in self.totals.items():
            text = f"{snapshot['steps'].get(pid, 0)}/{total} steps, {_status(snapshot, pid)}"
            if self.said.get(pid) != text:
                self.said[pid] = text
                elapsed_s = time.monotonic() - self.start_s
                print(f"[{elapsed_s:7.1f} s] {pid.ljust(self.width)}  {text}", file=self.stream, flush=True)

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


def _status(snapshot: dict[str, Any], pid: str) -> str:
    status = snapshot["pipelines"].get(pid, {}).get("status", "waiting")
    reward = snapshot["reward"].get(pid)
    return status if reward is None else f"{status}, reward {reward:.3f}"

