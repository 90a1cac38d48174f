"""What a full checkpoint costs for the shipped configs: the time to write one, and its size.

A full checkpoint (``Run{i}_Resume.pkl``, what ``resume=True`` continues from) is written at
every ``checkpoint_freq`` and on SIGTERM/SIGUSR1. Each config runs as users run it, through
``online-trainer run`` in this process, with its own settings but one seed in this process
(``num_runs=1 num_workers=1``), a short budget and ``checkpoint_freq`` at a quarter of it;
agents with a replay buffer run twice, without and with ``checkpoint_buffers=true``. Timed:
``RunEvents.snapshot``, the whole of writing one (flushing the records, the agent's ``save()``,
pickling the env and the tracker, the atomic write); the size is read from disk right after.
The periodic ``agent.save(path)`` checkpoints are not part of it.

    python bench/checkpoint_cost.py [--only cartpole_dqn ...] [--no-readme]

Atari, MiniGrid and MuJoCo configs need their extras (``pip install -e ".[atari,minigrid,mujoco]"``);
configs whose env cannot be made are skipped with a note.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "bench" / "README.md"
# config -> budget for this bench (steps, or episodes for an episode budget); short enough for 2 cores
BUDGETS = {
    "cliffwalking_q": 200,
    "cartpole_ppo": 20_000,
    "cartpole_dqn": 20_000,
    "pendulum_ppo": 20_000,
    "pendulum_sac": 8_000,
    "minigrid_ppo": 20_000,
    "breakout_ppo": 4_096,
    "halfcheetah_sac": 8_000,
}
BUFFER_AGENTS = ("dqn", "sac")


def measure(config: str, budget: int, buffers: bool) -> dict:
    """Run ``config`` once with full checkpoints timed; return each one's step, seconds and bytes."""
    from online_trainer.cli.main import main
    from online_trainer.records import storage
    from online_trainer.run.events import RunEvents

    data = yaml.safe_load((ROOT / "configs" / f"{config}.yaml").read_text())
    unit = "num_episodes" if "num_episodes" in data else "total_steps"
    snapshots: list[tuple[int, float, int]] = []
    original = RunEvents.snapshot

    def timed(self, loop):
        start = time.perf_counter()
        original(self, loop)
        seconds = time.perf_counter() - start
        snapshots.append(
            (loop.global_step, seconds, os.path.getsize(storage.resume_path(self.spec.exp_dir, self.spec.run_idx)))
        )

    with tempfile.TemporaryDirectory() as tmp:
        RunEvents.snapshot = timed
        try:
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):  # the command's own table
                code = main(
                    [
                        "run",
                        str(ROOT / "configs" / f"{config}.yaml"),
                        "num_runs=1",
                        "num_workers=1",
                        f"{unit}={budget}",
                        f"checkpoint_freq={max(1, budget // 4)}",
                        f"exp_dir={tmp}/exp",
                        f"checkpoint_buffers={'true' if buffers else 'false'}",
                        "--no-progress",
                    ]
                )
            wall = time.perf_counter() - start
        finally:
            RunEvents.snapshot = original
    if code != 0:
        raise RuntimeError(f"online-trainer run {config} exited with {code}")
    return {
        "config": config,
        "agent": data["agent"]["name"],
        "buffers": buffers,
        "unit": unit,
        "budget": budget,
        "snapshots": snapshots,
        "wall": wall,
    }


def row(result: dict) -> str:
    steps, seconds, sizes = zip(*result["snapshots"])
    unit = "episodes" if result["unit"] == "num_episodes" else "steps"
    share = sum(seconds) / result["wall"]
    buffers = "yes" if result["buffers"] else ("no" if result["agent"] in BUFFER_AGENTS else "-")
    return (
        f"| {result['config']} | {buffers} | {len(seconds)} in {result['budget']:,} {unit} | "
        f"{1e3 * float(np.median(seconds)):.1f} [{1e3 * min(seconds):.1f}-{1e3 * max(seconds):.1f}] | "
        f"{sizes[-1] / 1e6:.2f} (step {steps[-1]:,}) | {100 * share:.2f}% |"
    )


def table(results: list[dict]) -> str:
    header = (
        "| config | replay buffer in it | full checkpoints | ms each, median [min-max] | MB, the last "
        "(at env step) | share of the run's wall time |\n|---|---|---|---|---|---|"
    )
    return "\n".join([header, *(row(r) for r in results)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=list(BUDGETS), choices=sorted(BUDGETS))
    parser.add_argument("--no-readme", action="store_true", help="print the table only")
    args = parser.parse_args(argv)
    results, skipped = [], []
    for config in args.only:
        agent = yaml.safe_load((ROOT / "configs" / f"{config}.yaml").read_text())["agent"]["name"]
        for buffers in (False, True) if agent in BUFFER_AGENTS else (False,):
            try:
                results.append(measure(config, BUDGETS[config], buffers))
            except Exception as exc:  # an extra not installed: say so and go on
                skipped.append(f"{config}: {exc}")
                break
            print(row(results[-1]), flush=True)
    text = table(results)
    print(text)
    for note in skipped:
        print("skipped:", note, file=sys.stderr)
    if not args.no_readme:
        readme = README.read_text()
        block = f"<!-- checkpoint-cost -->\n{text}\n<!-- /checkpoint-cost -->"
        readme = re.sub(r"<!-- checkpoint-cost -->.*?<!-- /checkpoint-cost -->", lambda _: block, readme, flags=re.S)
        README.write_text(readme)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
