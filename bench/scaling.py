"""Wall time of 4 CPU-bound runs with 1 and 2 worker processes (and every core), and with Ray.

Each run is a DQN agent on CartPole-v1 training every step for ``--steps`` env steps (or,
with ``--agent ppo``, the PPO agent of ``configs/cartpole_ppo.yaml``), one torch thread per
worker. Settings alternate over ``--repeats`` repetitions and the best wall time of each is
kept, which filters out the noise of a shared machine. Ray's start-up (``ray.init``) is
timed apart and taken out, as it is paid once per session; the pool's start-up (new
interpreters importing torch, once per ``multi_run`` call) is counted, and also measured
apart with runs of a single step. The same seeds give the same records everywhere (checked).
Targets on a 2-core machine: at least 1.8x with 2 workers; Ray within 10% of the pool.

    python bench/scaling.py [--runs 4] [--steps 4000] [--agent dqn|ppo] [--repeats 3] [--no-ray]
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time

from agents import DQNAgent, PPOAgent
from callbacks import EmptyCallBack
from envs import make_env
from online_trainer import OnlineTrainer


class DQNFactory:
    """Builds a DQN agent that trains on every step after a short warm-up (one env)."""

    num_envs = 1

    def __call__(self, env):
        return DQNAgent(env, learning_starts=200, train_freq=1, batch_size=64, hidden_sizes=(128, 128))


class PPOFactory:
    """Builds the PPO agent of configs/cartpole_ppo.yaml (eight envs)."""

    num_envs = 8

    def __call__(self, env):
        return PPOAgent(env, n_steps=32, n_epochs=10, minibatch_size=256, gamma=0.98, gae_lambda=0.8, lr=5e-4)


FACTORIES = {"dqn": DQNFactory, "ppo": PPOFactory}
FACTORY = DQNFactory()


def timed_run(runs: int, steps: int, **options) -> tuple[float, list]:
    with tempfile.TemporaryDirectory() as tmp:
        trainer = OnlineTrainer(make_env("CartPole-v1", num_envs=FACTORY.num_envs), FACTORY, exp_dir=tmp)
        trainer.call_back = EmptyCallBack()
        start = time.perf_counter()
        records = trainer.multi_run(runs, total_steps=steps, seed_offset=0, progress=False, **options)
        return time.perf_counter() - start, [[r["ep_return"] for r in run] for run in records]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--agent", choices=sorted(FACTORIES), default="dqn")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    global FACTORY
    FACTORY = FACTORIES[args.agent]()
    logging.basicConfig(level=logging.WARNING)
    import torch

    torch.set_num_threads(1)  # the serial baseline gets one core, like each worker
    # torch imports torch._dynamo (about 1 s) at the first optimizer it builds; pay that here, so
    # the serial time does not include it. Workers pay it again: that is part of the pool's cost.
    FACTORY(make_env("CartPole-v1", num_envs=FACTORY.num_envs)())
    cores = os.cpu_count() or 1
    settings = {"serial (1 process)": {"torch_threads": 1}}
    settings.update({f"{w} worker processes": {"num_workers": w} for w in sorted({2, cores} - {1})})
    startup = 0.0
    if not args.no_ray:
        import ray

        start = time.perf_counter()
        ray.init(num_cpus=cores, include_dashboard=False, configure_logging=False)
        startup = time.perf_counter() - start
        settings["ray, 2 tasks at once"] = {"num_workers": 2, "backend": "ray"}

    best = {name: float("inf") for name in settings}
    reference = None
    for _ in range(args.repeats):
        for name, options in settings.items():
            wall, records = timed_run(args.runs, args.steps, **options)
            reference = reference or records
            assert records == reference, f"{name}: records differ from serial"
            best[name] = min(best[name], wall)
    # what one call costs apart from the runs: the same call with runs of a single env step
    pool_startup = timed_run(2, 1, num_workers=2)[0] - timed_run(2, 1, torch_threads=1)[0]

    serial, pool = best["serial (1 process)"], best["2 worker processes"]
    print(f"{args.runs} {args.agent.upper()} runs of {args.steps} env steps on a {cores}-core machine, "
          f"best of {args.repeats}")
    print(f"{'setting':<28} {'wall s':>8} {'speedup':>8}")
    for name, wall in best.items():
        note = ""
        if name.startswith("ray"):
            note = f"   (ray.init {startup:.1f} s not counted; {wall / pool:.2f}x the pool's time)"
        print(f"{name:<28} {wall:>8.2f} {serial / wall:>8.2f}{note}")
    print(f"the pool's start-up per call: {pool_startup:.2f} s; without it 2 workers give "
          f"{serial / (pool - pool_startup):.2f}x")
    if not args.no_ray:
        ray.shutdown()


if __name__ == "__main__":
    main()
