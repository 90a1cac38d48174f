"""Wall time of 4 CPU-bound runs in this process, in 2 worker processes (and every core) and on Ray.

Each run is a DQN agent on CartPole-v1 training on every step for ``--steps`` env steps (or,
with ``--agent ppo``, the PPO agent of ``configs/cartpole_ppo.yaml``; with ``--agent numpy``, an
agent whose every update is three 64x64 ``np.tanh(x @ m)`` through numpy's BLAS), one thread per
pool (torch, BLAS, OpenMP) and process: ``torch_threads=1``, the default. Run it as users run
their scripts, in a fresh process whose environment sets no ``OMP_NUM_THREADS`` and the like (the
header says which it found): an agent doing matrix products in workers that each start one BLAS
thread per core would not scale, and a bench run with the variables exported would hide that. The speed of a shared machine drifts by 20% or more within a minute, so settings
are measured in pairs next to each other (serial, then parallel) and each speedup is the
median over ``--repeats`` pairs, not a ratio of two walls taken minutes apart.

Reported:

- **warm calls**: ``multi_run`` calls after the first, whose worker processes are already
  running (as every call but the first of a session, and every configuration of a sweep);
- **first calls**: a call that starts its workers, with spawn (the default), and once with
  forkserver (the server imports torch once; its workers fork with it loaded);
- **Ray**: warm and first calls of 2 tasks at a time, paired with serial calls made while
  Ray runs (its own processes take some CPU); ``ray.init`` is timed apart and not counted;
- **the ceiling**: the same agent in a bare hand-written loop, ``runs / 2`` runs in each of
  2 processes, timed inside them, against all runs in this process: the speedup this
  machine allows for this workload, with no runner at all.

The same seeds give the same records in every setting (checked).
Targets on a 2-core machine: at least 1.8x with 2 workers; Ray within 10% of the pool.

    python bench/scaling.py [--runs 4] [--steps 4000] [--agent dqn|ppo|numpy] [--repeats 3] [--no-ray]
    python bench/scaling.py --agent numpy --steps 40000 --pool-only    # serial vs 2 workers, first call and warm
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import statistics
import tempfile
import time

import numpy as np
import threadpoolctl

from online_trainer import OnlineTrainer, shutdown_workers
from online_trainer.agents import DQNAgent, PPOAgent
from online_trainer.callbacks import EmptyCallBack
from online_trainer.envs import make_env
from online_trainer.parallel.threads import THREAD_VARIABLES


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


class NumpyAgent:
    """Random actions; each update computes ``x = np.tanh(x @ m)`` three times with 64x64 matrices (numpy's BLAS)."""

    def __init__(self, env) -> None:
        self.space = env.action_space
        rng = np.random.default_rng(0)
        self.x, self.m = rng.standard_normal((64, 64)), rng.standard_normal((64, 64)) / 8

    def reset(self, seed: int) -> None:
        self.space.seed(seed)

    def act(self, obs):
        return self.space.sample()

    def update(self, next_obs, reward, terminated, truncated, call_back=None) -> None:
        x = self.x
        for _ in range(3):
            x = np.tanh(x @ self.m)


class NumpyFactory:
    """Builds a :class:`NumpyAgent` (one env)."""

    num_envs = 1

    def __call__(self, env):
        return NumpyAgent(env)


FACTORIES = {"dqn": DQNFactory, "ppo": PPOFactory, "numpy": NumpyFactory}


def timed_run(factory, runs: int, steps: int, **options) -> tuple[float, list]:
    """Wall time of one ``multi_run`` call, and the returns of its episodes."""
    with tempfile.TemporaryDirectory() as tmp:
        trainer = OnlineTrainer(make_env("CartPole-v1", num_envs=factory.num_envs), factory, exp_dir=tmp)
        trainer.call_back = EmptyCallBack()
        start = time.perf_counter()
        records = trainer.multi_run(runs, total_steps=steps, seed_offset=0, progress=False, **options)
        return time.perf_counter() - start, [[r["ep_return"] for r in run] for run in records]


def bare_runs(factory, runs: int, steps: int) -> float:
    """Seconds of ``runs`` hand-written act -> step -> update loops of ``steps`` env steps each."""
    import torch

    torch.set_num_threads(1)
    threadpoolctl.threadpool_limits(limits=1)  # BLAS and OpenMP too, as in a worker
    envs = [make_env("CartPole-v1", num_envs=factory.num_envs)() for _ in range(runs)]
    agents = [factory(env) for env in envs]  # built before timing, like the torch._dynamo import they trigger
    start = time.perf_counter()
    for seed, (env, agent) in enumerate(zip(envs, agents)):
        agent.reset(seed)
        obs, _ = env.reset(seed=seed)
        for _ in range(steps // factory.num_envs):
            obs, reward, terminated, truncated, _ = env.step(agent.act(obs))
            agent.update(obs, reward, terminated, truncated)
    return time.perf_counter() - start


def _bare_worker(factory, runs: int, steps: int, results) -> None:
    results.put(bare_runs(factory, runs, steps))


def bare_in_processes(factory, runs: int, steps: int, processes: int) -> float:
    """Seconds until the last of ``processes`` spawned processes ran its share of the bare loops."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    children = [
        context.Process(target=_bare_worker, args=(factory, runs // processes, steps, results))
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    walls = [results.get() for _ in children]
    for child in children:
        child.join()
    return max(walls)


class Measurements:
    """Walls and speedups of settings measured in pairs with a serial call."""

    def __init__(self, factory, runs: int, steps: int) -> None:
        self.factory, self.runs, self.steps = factory, runs, steps
        self.reference: list | None = None
        self.walls: dict[str, list[float]] = {}
        self.speedups: dict[str, list[float]] = {}

    def call(self, **options) -> float:
        wall, records = timed_run(self.factory, self.runs, self.steps, **options)
        self.reference = self.reference or records
        assert records == self.reference, f"{options}: records differ from serial"
        return wall

    def pair(self, name: str, parallel_wall: float | None = None, **options) -> None:
        """A serial call, then the ``name`` setting (or its given wall), recorded as a pair."""
        serial = self.call(torch_threads=1)
        wall = self.call(**options) if parallel_wall is None else parallel_wall
        self.walls.setdefault(name, []).append(wall)
        self.speedups.setdefault(name, []).append(serial / wall)
        self.walls.setdefault("serial", []).append(serial)

    def row(self, name: str) -> str:
        walls, speedups = self.walls[name], self.speedups.get(name)
        if speedups:
            speedup = f"{statistics.median(speedups):>8.2f} {min(speedups):>6.2f}-{max(speedups):<6.2f}"
        else:  # serial: the range of its walls shows how much the machine drifted
            speedup = f"{'':>8} {min(walls):>6.1f}-{max(walls):<6.1f} s"
        return f"{name:<44} {statistics.median(walls):>7.2f} {len(walls):>3}  {speedup}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--agent", choices=sorted(FACTORIES), default="dqn")
    parser.add_argument("--repeats", type=int, default=3, help="pairs per setting")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument(
        "--pool-only", action="store_true", help="only serial against 2 worker processes, first call (spawn) and warm"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    factory = FACTORIES[args.agent]()
    cores = os.cpu_count() or 1
    import torch

    torch.set_num_threads(1)  # the serial baseline gets one core, like each worker (its calls limit BLAS too)
    # torch imports torch._dynamo (about 1.5 s) at the first optimizer it builds; pay that here, so
    # the serial time does not include it. Workers pay it again: that is part of their start-up.
    factory(make_env("CartPole-v1", num_envs=factory.num_envs)())
    m = Measurements(factory, args.runs, args.steps)
    pools = {f"{w} worker processes": w for w in sorted({2, cores} - {1})}

    if args.pool_only:
        pools = {"2 worker processes": 2}
    for name, workers in pools.items():
        for _ in range(args.repeats):
            shutdown_workers()
            m.pair(f"{name}, first call (spawn)", num_workers=workers)
            m.pair(f"{name}, warm", num_workers=workers)
    shutdown_workers()
    if args.pool_only:
        report(args, m, cores)
        return
    # a forkserver starts once per process: its first call can be measured once
    m.pair("2 worker processes, first call (forkserver)", num_workers=2, start_method="forkserver")
    shutdown_workers()
    # what starting workers adds to a call: runs of a single env step, new pool minus serial
    serial_tiny = timed_run(factory, 2, 1, torch_threads=1)[0]
    startup = {
        method: timed_run(factory, 2, 1, num_workers=2, start_method=method)[0] - serial_tiny
        for method in ("spawn", "forkserver")
    }
    shutdown_workers()
    for _ in range(args.repeats):
        m.pair("bare loop, runs split over 2 processes", bare_in_processes(factory, args.runs, args.steps, 2))

    if not args.no_ray:
        import ray

        start = time.perf_counter()
        ray.init(num_cpus=cores, include_dashboard=False, configure_logging=False, logging_level=logging.ERROR)
        ray_init = time.perf_counter() - start
        m.pair("Ray, 2 tasks at a time, first call", num_workers=2, backend="ray")
        for _ in range(args.repeats):
            m.pair("Ray, 2 tasks at a time, warm", num_workers=2, backend="ray")
        ray.shutdown()

    report(args, m, cores)
    if not args.no_ray:
        ratio = statistics.median(m.speedups["2 worker processes, warm"]) / statistics.median(
            m.speedups["Ray, 2 tasks at a time, warm"]
        )
        print(
            f"Ray / pool, warm: {ratio:.2f} (ratio of their median speedups); ray.init: {ray_init:.1f} s, not counted"
        )
    print(
        "start-up of new workers per call (2 runs of 1 step, minus serial): "
        + ", ".join(f"{method} {seconds:.2f} s" for method, seconds in startup.items())
        + " (forkserver with its server already running)"
    )


def report(args: argparse.Namespace, m: Measurements, cores: int) -> None:
    """The table: each setting's median wall and its speedup over the serial call it was paired with."""
    exported = {name: os.environ[name] for name in THREAD_VARIABLES if name in os.environ}
    print(
        f"{args.runs} {args.agent.upper()} runs of {args.steps} env steps on a {cores}-core machine, one thread per "
        f"pool and process; each setting paired with a serial call, speedup = serial / setting"
    )
    print(
        f"thread variables in this process's environment: {exported or 'none (as users have it)'}; "
        f"load average before/after: {LOAD_BEFORE[0]:.2f}/{os.getloadavg()[0]:.2f}"
    )
    print(f"{'setting':<44} {'wall s':>7} {'n':>3}  {'speedup':>8} {'range':>13}")
    print(m.row("serial"))
    for name in m.speedups:
        print(m.row(name))


LOAD_BEFORE = os.getloadavg()

if __name__ == "__main__":
    main()
