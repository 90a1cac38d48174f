"""Learning results of the shipped configs: does each reference agent learn, on every seed?

Each config runs through the command users run (``online-trainer run``), 5 seeds, with a
checkpoint at the end of each run. Results are kept in ``<out>/learning_results.json``, so
configs can be measured in separate calls (``--only``); the table is written once all are in. Per seed it prints the mean return of the last 10
training episodes and the greedy return of the final agent (``OnlineTrainer.evaluate("last")``:
20 episodes of ``Run{i}_Last`` on the run's eval seed; mean and IQM across seeds with 95% CIs), plus the wall time of the whole config, and writes the table into
``bench/README.md`` between the ``learning-results`` markers.

Targets (5 seeds unless said, at least 4 of 5 must reach it):
  Q-learning on CliffWalking-v1, 500 episodes: greedy return -13
  DQN on CartPole-v1, 150k env steps: last-10 return >= 450
  PPO on CartPole-v1, 150k env steps: last-10 return >= 450
  PPO on Pendulum-v1, 300k env steps: last-10 return > -400
  PPO on MiniGrid-Empty-5x5-v0, 50k env steps: greedy return >= 0.9 (solved)
  SAC on Pendulum-v1, 20k env steps: greedy return > -200
  SAC on HalfCheetah-v5, 20k env steps, 2 seeds (a budget for 2 cores): last-10 return > 0 (random: about -300)
  PPO on Breakout (ALE v5, the standard Atari pipeline), 20k env steps, 1 seed: the pipeline runs end to end and
    reports raw game scores (last-10 >= 0); learning Breakout takes millions of steps

Configs with ``score: raw`` are measured on raw scores (``raw_return``; their greedy evaluation too).

    python bench/learning.py [--only cartpole_ppo ...] [--out runs/bench]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Target:
    config: str
    title: str
    measure: str  # "greedy" or "last10"
    threshold: float
    at_least: bool = True  # False: strictly greater

    def reached(self, value: float) -> bool:
        return value >= self.threshold if self.at_least else value > self.threshold


TARGETS = [
    Target("cliffwalking_q", "Q-learning, CliffWalking-v1, 500 episodes", "greedy", -13),
    Target("cartpole_dqn", "DQN, CartPole-v1, 150k steps", "last10", 450),
    Target("cartpole_ppo", "PPO, CartPole-v1, 150k steps", "last10", 450),
    Target("pendulum_ppo", "PPO, Pendulum-v1, 300k steps", "last10", -400, at_least=False),
    Target("minigrid_ppo", "PPO, MiniGrid-Empty-5x5-v0 (flat image), 50k steps", "greedy", 0.9),
    Target("pendulum_sac", "SAC, Pendulum-v1, 20k steps", "greedy", -200, at_least=False),
    Target("halfcheetah_sac", "SAC, HalfCheetah-v5, 20k steps (2 seeds)", "last10", 0, at_least=False),
    Target("breakout_ppo", "PPO, Breakout (ALE v5, Atari pipeline, raw game score), 20k steps (1 seed)", "last10", 0),
]


def run_config(target: Target, out: Path) -> tuple[Path, float]:
    """Run a config with the CLI; return its experiment directory and wall time."""
    import yaml

    config = yaml.safe_load((ROOT / "configs" / f"{target.config}.yaml").read_text())
    budget = config.get("num_episodes") or config.get("total_steps")
    exp_dir = out / target.config
    command = [
        sys.executable,
        "-m",
        "online_trainer",
        "run",
        str(ROOT / "configs" / f"{target.config}.yaml"),
        f"exp_dir={exp_dir}",
        "overwrite=true",
        f"checkpoint_freq={budget}",
        "--no-progress",
    ]
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT)
    return exp_dir, time.perf_counter() - start


def greedy_returns(exp_dir: Path, episodes: int = 20) -> list[float]:
    """Mean return of ``episodes`` greedy episodes of each run's last checkpoint (``OnlineTrainer.evaluate``)."""
    from online_trainer import OnlineTrainer
    from online_trainer.config.builders import factories_from_config

    make_env, make_agent = factories_from_config(exp_dir)
    episodes_df = OnlineTrainer(make_env, make_agent).evaluate(
        "last", num_episodes=episodes, num_workers=2, exp_dir=exp_dir, overwrite=True, progress=False
    )
    return [float(v) for v in episodes_df.groupby("run")["ep_return"].mean()]


def last10_returns(exp_dir: Path) -> list[float]:
    from online_trainer import load_episodes

    df = load_episodes(exp_dir)
    column = "raw_return" if df.attrs.get("score") == "raw" else "ep_return"
    return [float(g[column].tail(10).mean()) for _, g in df.sort_values("episode_index").groupby("run")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="config names to run (default: all)")
    parser.add_argument("--out", default=str(ROOT / "runs" / "bench"), help="where the experiments go")
    args = parser.parse_args()
    results_file = Path(args.out) / "learning_results.json"
    results = json.loads(results_file.read_text()) if results_file.is_file() else {}
    for target in TARGETS:
        if args.only and target.config not in args.only:
            continue
        exp_dir, wall = run_config(target, Path(args.out))
        last10, greedy = last10_returns(exp_dir), greedy_returns(exp_dir)
        results[target.config] = {"last10": last10, "greedy": greedy, "wall": wall}
        results_file.write_text(json.dumps(results, indent=2))
        print(
            f"{target.title}: last-10 {np.round(last10, 1).tolist()} greedy {np.round(greedy, 1).tolist()}; "
            f"{wall / 60:.1f} min",
            flush=True,
        )
    rows = []
    for target in TARGETS:
        if target.config in results:
            result = results[target.config]
            measured = result["greedy"] if target.measure == "greedy" else result["last10"]
            rows.append(
                (target, result["last10"], result["greedy"], sum(map(target.reached, measured)), result["wall"])
            )
    table = render(rows)
    print(table)
    if len(rows) == len(TARGETS):  # every config measured (in this call or earlier ones into --out)
        write_readme(table)


def render(rows) -> str:
    import pandas as pd

    from online_trainer import aggregate

    lines = [
        "| config | target | last-10 return per seed | greedy return per seed | greedy mean [95% CI] | "
        "greedy IQM [95% CI] | seeds at target | wall time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for target, last10, greedy, reached, wall in rows:
        sign = ">=" if target.at_least else ">"
        stats = aggregate(pd.DataFrame({"final_return": greedy})).iloc[0]

        def cell(name, stats=stats):
            return f"{stats[name]:.1f} [{stats[name + '_lo']:.1f}, {stats[name + '_hi']:.1f}]"

        lines.append(
            f"| {target.title} | {target.measure} {sign} {target.threshold:g} | "
            f"{', '.join(f'{v:.1f}' for v in last10)} | {', '.join(f'{v:.1f}' for v in greedy)} | "
            f"{cell('mean')} | {cell('iqm')} | {reached}/{len(greedy)} | {wall / 60:.1f} min |"
        )
    return "\n".join(lines)


def write_readme(table: str) -> None:
    path = ROOT / "bench" / "README.md"
    text = path.read_text()
    block = f"<!-- learning-results -->\n{table}\n<!-- /learning-results -->"
    text = re.sub(r"<!-- learning-results -->.*<!-- /learning-results -->", lambda _: block, text, flags=re.S)
    path.write_text(text)


if __name__ == "__main__":
    main()
