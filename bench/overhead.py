"""Overhead of ``multi_run`` over a bare hand-written gymnasium loop, in one process.

The same seeded random agent runs on CartPole-v1 for the same number of env steps through:

* ``bare``: the loop a user writes by hand (act, step, update, returns and lengths, records);
* ``multi_run`` with ``EmptyCallBack``;
* ``multi_run`` with the default ``TBCallBack(flush_every=1)``, the agent logging one metric
  per step.

Repetitions alternate between the variants and the best of each is kept, so machine noise
hits all of them alike. Targets at num_envs=1: EmptyCallBack <= 1.05, TBCallBack <= 1.15.

    python bench/overhead.py [--steps 20000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time

import gymnasium as gym
import numpy as np

from callbacks import EmptyCallBack
from online_trainer import OnlineTrainer


class RandomAgent:
    """Samples actions from a seeded action space; logs one metric per update when asked."""

    def __init__(self, env):
        self.space = env.action_space
        self.n = 0

    def reset(self, seed):
        self.space.seed(seed)

    def act(self, obs):
        return self.space.sample()

    def update(self, next_obs, reward, terminated, truncated, call_back=None):
        self.n += 1
        if call_back is not None:
            call_back({"n": self.n})


def bare_loop(num_envs: int, total_steps: int, seed: int) -> list[dict]:
    """What a careful user writes by hand for NEXT_STEP autoreset."""
    env = gym.make_vec("CartPole-v1", num_envs=num_envs)
    agent = RandomAgent(env)
    agent.reset(seed)
    obs, _ = env.reset(seed=seed)
    returns = np.zeros(num_envs)
    lengths = np.zeros(num_envs, dtype=np.int64)
    reset_step = np.zeros(num_envs, dtype=bool)
    records, steps = [], 0
    while steps < total_steps:
        actions = agent.act(obs)
        obs, reward, terminated, truncated, _ = env.step(actions)
        agent.update(obs, reward, terminated, truncated)
        real = ~reset_step
        returns += reward
        lengths += real
        steps += int(real.sum())
        reset_step = terminated | truncated
        for i in np.flatnonzero(reset_step):
            records.append({"ep_return": float(returns[i]), "ep_length": int(lengths[i]), "global_step": steps})
            returns[i] = 0.0
            lengths[i] = 0
    env.close()
    return records


def trainer_run(num_envs: int, total_steps: int, seed: int, callback: str, exp_dir: str) -> list[dict]:
    trainer = OnlineTrainer(lambda: gym.make_vec("CartPole-v1", num_envs=num_envs), RandomAgent, exp_dir=exp_dir)
    if callback == "empty":
        trainer.call_back = EmptyCallBack()
    (records,) = trainer.multi_run(1, total_steps=total_steps, seed_offset=seed, dump_metrics=False, progress=False)
    return records


def measure(num_envs: int, total_steps: int, repeats: int) -> dict[str, float]:
    best = {"bare": float("inf"), "empty": float("inf"), "tb": float("inf")}
    for _ in range(repeats):
        for variant in best:
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                if variant == "bare":
                    records = bare_loop(num_envs, total_steps, seed=0)
                else:
                    records = trainer_run(num_envs, total_steps, 0, variant, tmp)
                best[variant] = min(best[variant], time.perf_counter() - start)
            if variant == "bare":
                reference = [(r["ep_return"], r["ep_length"]) for r in records]
            else:
                assert [(r["ep_return"], r["ep_length"]) for r in records] == reference, "runs differ"
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="env steps per run (all sub-envs together)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(f"{'num_envs':>8} {'bare s':>8} {'empty s':>8} {'tb s':>8} {'empty/bare':>11} {'tb/bare':>8}")
    for num_envs in (1, 8):
        t = measure(num_envs, args.steps * (1 if num_envs == 1 else 4), args.repeats)
        print(f"{num_envs:>8} {t['bare']:>8.3f} {t['empty']:>8.3f} {t['tb']:>8.3f} "
              f"{t['empty'] / t['bare']:>11.3f} {t['tb'] / t['bare']:>8.3f}")


if __name__ == "__main__":
    main()
