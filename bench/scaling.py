"""Wall time of 4 CPU-bound runs with 1 and 2 worker processes (and every core), and with Ray.

Each run is a DQN agent on CartPole-v1 training every step for ``--steps`` env steps (or,
with ``--agent ppo``, the PPO agent of ``configs/cartpole_ppo.yaml``), one torch thread per
worker. Settings alternate over ``--repeats`` calls each. The first call of the pool starts
new worker processes (a new interpreter importing torch: its start-up is counted); later
calls find them warm, as ``multi_run`` calls in one session do, and the best of those is
kept, which filters out the noise of a shared machine. Ray runs last, as its own processes
would take CPU from the pool; its start-up (``ray.init``) is timed apart and taken out, as
the issue asks, and its first call imports torch in its workers.
The start-up of new workers is also measured apart, with runs of a single step. The same
seeds give the same records everywhere (checked).
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
from online_trainer import OnlineTrainer, shutdown_workers


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
    parser.add_argument("--repeats", type=int, default=3, help="calls per setting (at least 2)")
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    if args.repeats < 2:
        parser.error("--repeats must be at least 2: the first call and the later ones are reported apart")
    global FACTORY
    FACTORY = FACTORIES[args.agent]()
    logging.basicConfig(level=logging.WARNING)
    import torch

    torch.set_num_threads(1)  # the serial baseline gets one core, like each worker
    # torch imports torch._dynamo (about 1 s) at the first optimizer it builds; pay that here, so
    # the serial time does not include it. Workers pay it again: that is part of the pool's cost.
    FACTORY(make_env("CartPole-v1", num_envs=FACTORY.num_envs)())
    cores = os.cpu_count() or 1
    settings = {"serial": {"torch_threads": 1}}
    settings.update({f"{w} workers": {"num_workers": w} for w in sorted({2, cores} - {1})})
    first: dict[str, float] = {}
    later: dict[str, float] = {}
    reference = None

    def measure(names: list[str]) -> None:
        """Alternate the ``names`` settings over the repeats; keep the first and the best later wall."""
        nonlocal reference
        for repeat in range(args.repeats):
            for name in names:
                wall, records = timed_run(args.runs, args.steps, **settings[name])
                reference = reference or records
                assert records == reference, f"{name}: records differ from serial"
                if repeat == 0:
                    first[name] = wall
                else:
                    later[name] = min(later.get(name, wall), wall)

    measure(list(settings))
    # what new workers cost a call: the same call with runs of a single env step
    shutdown_workers()
    cold_startup = timed_run(2, 1, num_workers=2)[0] - timed_run(2, 1, torch_threads=1)[0]
    shutdown_workers()
    if not args.no_ray:
        # Ray last: its own processes (raylet, GCS, idle workers) would otherwise take CPU from the pool
        import ray

        start = time.perf_counter()
        ray.init(num_cpus=cores, include_dashboard=False, configure_logging=False)
        startup = time.perf_counter() - start
        settings["ray"] = {"num_workers": 2, "backend": "ray"}
        measure(["ray"])

    print(f"{args.runs} {args.agent.upper()} runs of {args.steps} env steps on a {cores}-core machine; first "
          f"call (new worker processes), then the best of {args.repeats - 1} later calls (warm workers)")
    print(f"{'setting':<24} {'first s':>8} {'speedup':>8} {'later s':>8} {'speedup':>8}")
    for name in settings:
        print(f"{name:<24} {first[name]:>8.2f} {first['serial'] / first[name]:>8.2f} "
              f"{later[name]:>8.2f} {later['serial'] / later[name]:>8.2f}")
    if not args.no_ray:
        print(f"ray.init: {startup:.1f} s, not counted. Ray / pool: {first['ray'] / first['2 workers']:.2f} on the "
              f"first call, {later['ray'] / later['2 workers']:.2f} later")
        ray.shutdown()
    print(f"start-up of new workers: {cold_startup:.2f} s per call (2 runs of 1 step, pool minus serial)")


if __name__ == "__main__":
    main()
