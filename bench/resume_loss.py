"""Steps a SIGKILL costs as a function of `checkpoint_every`, and what checkpoints cost.

    python bench/resume_loss.py [--every 0,2,4,8] [--kill-at 15] [--json]

For each value, cpu-demo runs with `executor.checkpoint_every` set to it; its driver is
SIGKILLed once its journal holds `--kill-at` finished adapter steps (of 36: ft 12, lora 2 x 12;
counted by steps, not seconds, so a busy machine cuts every run at the same point), and
`rlix-exec resume` finishes the run. Reported per value: the adapter steps the cut run had finished (from the journal),
the steps the resume started from (its segment line), so the steps lost, the checkpoints' share
of the run's step time (`checkpoint_s` over the summed step times), and both wall times, a line per value
as it ends (on stderr with `--json`); with `--json`, stdout gets one JSON line: `{"bench":
"resume_loss", "runs": [{"checkpoint_every", "steps_done", "steps_kept", "steps_lost",
"checkpoint_share", "cut_wall_s", "resume_wall_s"}]}`.
`steps_done` can exceed `--kill-at` by the steps that finished while the kill was sent.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from rlix.traces.options import non_negative_int, positive_int, separated_by_commas

RLIX_EXEC = [sys.executable, "-m", "rlix.executor.cli"]


def _scenario(folder: Path, every: int) -> Path:
    from rlix.scenarios import load_scenario

    data = yaml.safe_load(load_scenario("cpu-demo").to_yaml())
    data["executor"]["checkpoint_every"] = every
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _steps_done(live: Path) -> int:
    """Adapter steps in the journal so far (a line being written is skipped)."""
    try:
        text = (live / "journal.jsonl").read_text()
    except OSError:
        return 0
    count = 0
    for line in text.splitlines():
        try:
            count += len(json.loads(line).get("record", {}).get("steps", []))
        except ValueError:
            continue
    return count


def measure(every: int, kill_at: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env.update(HOME=str(home), XDG_CACHE_HOME=str(Path.home() / ".cache"))
        run, live = home / "run", home / ".run.live"
        started = time.monotonic()
        driver = subprocess.Popen([*RLIX_EXEC, "run", str(_scenario(home, every)), "--quiet", "--out", str(run)],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while _steps_done(live) < kill_at:
            if driver.poll() is not None:
                raise SystemExit(f"checkpoint_every={every}: the run ended before {kill_at} steps")
            time.sleep(0.2)
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        cut_wall_s = time.monotonic() - started
        steps_done = _steps_done(live)
        started = time.monotonic()
        done = subprocess.run([*RLIX_EXEC, "resume", str(run), "--quiet"], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"checkpoint_every={every}: resume failed: {done.stderr.strip()}")
        resume_wall_s = time.monotonic() - started
        segment = next(json.loads(line)["segment"] for line in (run / "events.jsonl").read_text().splitlines()
                       if line.startswith('{"segment"'))
        steps = pd.read_parquet(run / "steps.parquet")
        kept = int(((steps.t_end <= segment["at_s"])).sum())
        durations = (steps.t_end - steps.t_start).sum()
    return {"checkpoint_every": every, "steps_done": steps_done, "steps_kept": kept, "steps_lost": steps_done - kept,
            "checkpoint_share": round(float(steps.checkpoint_s.sum() / durations), 4),
            "cut_wall_s": round(cut_wall_s, 1), "resume_wall_s": round(resume_wall_s, 1)}


def total_steps() -> int:
    """cpu-demo's adapter steps in all (a pipeline without adapters counts as one)."""
    from rlix.scenarios import load_scenario

    return sum(sum(a.steps for a in p.adapters) if p.adapters else p.steps for p in load_scenario("cpu-demo").pipelines)


def every_values(text: str) -> list[int]:
    """`--every`: checkpoint_every values (0: no checkpoints) separated by commas."""
    return separated_by_commas(text, non_negative_int, "integers >= 0", "0,2,4")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="resume_loss.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--every", type=every_values, default="0,2,4,8", help="checkpoint_every values (default 0,2,4,8)")
    parser.add_argument("--kill-at", type=positive_int, default=15,
                        help="adapter steps done when the driver is killed (default 15)")
    parser.add_argument("--json", action="store_true", help="print one JSON line on stdout (the runs' lines on stderr)")
    args = parser.parse_args(argv)
    if args.kill_at >= (total := total_steps()):
        # else the run would end first, found only after a whole live run
        parser.error(f"argument --kill-at: cpu-demo has {total} adapter steps in all; kill before the last, "
                     f"not at {args.kill_at}")
    runs = []
    for every in args.every:
        run = measure(every, args.kill_at)
        print(f"checkpoint_every {every}: {run['steps_done']} adapter steps done at the kill, {run['steps_kept']} "
              f"kept, {run['steps_lost']} lost; checkpoints {run['checkpoint_share']:.1%} of step time; "
              f"cut run {run['cut_wall_s']} s, resume {run['resume_wall_s']} s",
              file=sys.stderr if args.json else sys.stdout, flush=True)
        runs.append(run)
    if args.json:
        print(json.dumps({"bench": "resume_loss", "runs": runs}))


if __name__ == "__main__":
    main()
