"""Cost of ``multi_run`` over a bare hand-written gymnasium loop, in one process.

What is measured is what users run: the whole ``OnlineTrainer(...).multi_run(1, total_steps=N)``
call with the default options (``exp_dir`` set, so records are streamed to
``metrics_run1.pkl`` and ``all_metrics.pkl`` is written; progress bars on), against the loop a
careful user writes by hand. Both drive the same near-free agent, so that the runner's own
cost is not hidden behind the agent's:

* ``act``: one draw of numpy's generator per step (``rng.integers``);
* ``update``: counts, and logs one metric through ``call_back`` when the trainer passes one
  (with ``EmptyCallBack`` it passes ``None``);
* ``log()``: defined and returning None, like agents built on ``agents.AgentBase``.

Variants, all on ``gym.make_vec("CartPole-v1", num_envs=n)`` (numpy-vectorised, NEXT_STEP
autoreset), each env built before the timer starts:

* ``bare``: act, step, update (``call_back=None``, as the runner passes it with ``EmptyCallBack``), sum returns and count lengths of real
  transitions only (the step after a done is a reset step), keep each episode's return and
  length, stop after N real transitions; in Python scalars for one sub-env, in numpy arrays
  for several;
* ``empty``: ``multi_run`` with ``trainer.call_back = EmptyCallBack()``;
* ``tb``: ``multi_run`` with the default ``TBCallBack(exp_dir, flush_every=1)``: two scalars
  per episode and the agent's one scalar per step. The agent builds its metric's dict only
  when it is given a ``call_back``, so the bare runs beside ``tb`` give it one too, as a hand
  loop that logs the agent's metrics must: ``call_back=kept.append``, the dicts kept in a
  list. What ``tb`` is charged is then the runner's part: keeping each value, encoding it and
  writing it to TensorBoard's file (and the episodes' two scalars);
* ``tb-plain``: ``tb`` against the bare loop without a ``call_back``, as this bench compared
  them until round 11: it also charges the runner with the agent's own dict and call;
* ``hook``: as ``empty``, with one user hook whose ``on_step`` runs every 1,000 env steps (it
  reads ``ctx.global_step``): the cost of the hooks' cadence;
* ``read``: as ``empty``, then every returned record's ``ep_return`` and ``ep_length`` read
  through its dict (``[(r["ep_return"], r["ep_length"]) for r in run]``) inside the timer;
* ``dqn``, ``ppo``: the whole call with the reference ``DQNAgent`` or ``PPOAgent`` at its
  defaults and the default callback: what the runner's cost is worth against a real agent's
  (their episodes are checked against the same variant's first run, not the bare loop's).

``multi_run`` hands each run back as a ``RunRecords`` whose dicts are built when they are read,
so ``empty`` and ``tb`` time the whole call alone, and
``read`` adds what a user pays to read every record as a dict; the bare loop's own list of
(return, length) pairs is built inside its loop. (On trees before ``RunRecords``, the dicts
were built inside the call.) Records of the other variants are read after the timer, for the
check.

Every repetition runs the bare loop, then each other variant (in an order rotated between
repetitions) followed by the bare loop again, on fresh experiment directories; the runs' returns
and lengths are checked equal to the bare loop's. A variant is compared with the mean of the two
bare runs beside it, which cancels a drift of the machine's speed across the pair. Reported, for
wall-clock time (what users wait for, including the runner's file writes and fsyncs) and for the
process's CPU time (less disturbed by other jobs on a shared machine): the median over
repetitions of the microseconds per env step (one real transition of one sub-env, the unit of
``total_steps``), of the extra microseconds over the bare runs beside it, and of the ratio to
them, with the ratio's interquartile range as the noise. ``best`` is the variant's fastest wall
time over the fastest of the bare runs beside it: other jobs and the host only ever add time,
so the fastest of many runs is what each side costs on a quiet machine (``timeit``'s reasoning).

``--env replay`` swaps CartPole for :class:`ReplayVecEnv`, which replays precomputed steps at next
to no cost: the ratios then mean little, but the ``extra`` microseconds are the runner's own work
per env step, measured without a real env's noise (and without the cache traffic it adds, so they
are a lower bound of the extra with a real env).

``--env-time`` times ``env.step`` alone, with the same wrapper on the bare loop's env and the call's: the last
columns give its microseconds per env step and their extra over the bare runs beside it. The env's own step
runs slower beside the runner's work than beside the bare loop's (round 11: +1.5-2 us a vector step of
64-sub-env CartPole, about half the ``empty`` extra), though it is given the same actions and does the same
work: part of the extra is the interpreter and the caches shared by both, not the runner's own instructions.

    python bench/overhead.py [--repeats 7] [--steps 1:30000,8:120000,64:480000] [--variants bare,empty,tb,tb-plain,read,hook] [--env cartpole|replay] [--env-time] [--raw FILE]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from typing import Any

import gymnasium as gym
import numpy as np

from online_trainer import OnlineTrainer
from online_trainer.callbacks import EmptyCallBack
from online_trainer.hooks import Hook

DEFAULT_STEPS = {1: 30_000, 8: 120_000, 64: 480_000}
VARIANTS = ("bare", "empty", "tb", "tb-plain", "read", "hook")
AGENT_LOGS = ("tb",)  # variants whose bare runs give the agent a call_back (it builds its metrics then)
REAL_AGENTS = ("dqn", "ppo")  # not in the default variants: they time the agents, not the runner


class CheapAgent:
    """Acts with one RNG draw per step and logs one metric per update when given a call_back."""

    def __init__(self, env: Any) -> None:
        self.num_actions = int(env.single_action_space.n)
        self.num_envs = env.num_envs
        self.rng = np.random.default_rng(0)
        self.updates = 0

    def reset(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.updates = 0

    def act(self, obs: np.ndarray) -> np.ndarray:
        return self.rng.integers(self.num_actions, size=self.num_envs)

    def update(self, next_obs, reward, terminated, truncated, call_back=None) -> None:
        self.updates += 1
        if call_back is not None:
            call_back({"updates": self.updates})

    def log(self) -> None:
        return None


class EveryThousandSteps(Hook):
    """A user hook with the cheapest ``on_step``: what the ``hook`` variant adds is the cadence itself."""

    every_steps = 1000

    def __init__(self) -> None:
        self.calls = 0

    def on_step(self, ctx: Any) -> None:
        self.calls += ctx.global_step > 0


class ReplayVecEnv(gym.vector.VectorEnv):
    """A vector env that costs next to nothing: it replays precomputed CartPole-shaped steps.

    Episodes end with probability 1/22 a step (CartPole's mean under a random policy), with
    NEXT_STEP autoreset: a sub-env's step after its episode ends is its reset step (reward 0,
    neither flag set). Actions are ignored. With it, a variant's extra microseconds are the
    runner's own work, without the noise and the cache traffic of a real env's step.
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int, period: int = 4096) -> None:
        self.num_envs = num_envs
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        rng = np.random.default_rng(0)
        self.obs = rng.standard_normal((period, num_envs, 4)).astype(np.float32)
        self.terminated = rng.random((period, num_envs)) < 1 / 22
        self.terminated[[0, -1]] = False  # row 0 is the reset's; the last one is followed by row 0 again
        for t in range(1, period):  # the step after a done is a reset step
            self.terminated[t] &= ~self.terminated[t - 1]
        self.rewards = np.where(np.vstack([np.zeros((1, num_envs), bool), self.terminated[:-1]]), 0.0, 1.0)
        self.truncated = np.zeros((period, num_envs), bool)
        self.period, self.t = period, 0

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[np.ndarray, dict]:
        self.t = 0
        return self.obs[0], {}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        t = self.t = (self.t + 1) % self.period
        return self.obs[t], self.rewards[t], self.terminated[t], self.truncated[t], {}


ENVS = ("cartpole", "replay")
ENV = "cartpole"  # set by --env
ENV_TIME = False  # set by --env-time


def timed_steps(env: Any) -> list[float]:
    """Time every ``env.step`` of ``env`` (an instance attribute over the class's method); return the running total.

    The same wrapper goes on the env of the bare loop and of the call, so what it costs is the same on both sides.
    """
    inner, clock, total = env.step, time.perf_counter, [0.0]

    def step(actions: Any) -> Any:
        start = clock()
        out = inner(actions)
        total[0] += clock() - start
        return out

    env.step = step
    return total


def make_env(num_envs: int) -> Any:
    if ENV == "replay":
        return ReplayVecEnv(num_envs)
    return gym.make_vec("CartPole-v1", num_envs=num_envs)


def bare_loop(env: Any, total_steps: int, seed: int, keep_logs: bool = False) -> list[tuple[float, int]]:
    """The loop a careful user writes by hand for NEXT_STEP autoreset; returns (return, length) per episode.

    Real transitions only: the step after a sub-env's episode ends is its reset step, not
    counted in lengths or steps (its reward is 0). With one sub-env the book-keeping is in
    Python scalars, as one writes it for a single env; with several, in numpy arrays.
    ``keep_logs``: the agent gets ``call_back=kept.append`` and its metrics' dicts are kept.
    """
    agent = CheapAgent(env)
    kept: list[Any] = []
    call_back = kept.append if keep_logs else None
    agent.reset(seed)
    obs, _ = env.reset(seed=seed)
    num_envs = env.num_envs
    episodes: list[tuple[float, int]] = []
    steps = 0
    if num_envs == 1:
        ep_return, length, reset_step = 0.0, 0, False
        while steps < total_steps:
            actions = agent.act(obs)
            obs, reward, terminated, truncated, _ = env.step(actions)
            agent.update(obs, reward, terminated, truncated, call_back=call_back)
            if reset_step:
                reset_step = False
                continue
            ep_return += float(reward[0])
            length += 1
            steps += 1
            if terminated[0] or truncated[0]:
                episodes.append((ep_return, length))
                ep_return, length, reset_step = 0.0, 0, True
        return episodes
    returns = np.zeros(num_envs)
    lengths = np.zeros(num_envs, dtype=np.int64)
    real = np.ones(num_envs, dtype=bool)  # False on a sub-env's reset step
    while steps < total_steps:
        actions = agent.act(obs)
        obs, reward, terminated, truncated, _ = env.step(actions)
        agent.update(obs, reward, terminated, truncated, call_back=call_back)
        returns += reward
        lengths += real
        steps += np.count_nonzero(real)
        done = terminated | truncated
        if done.any():
            for i in np.flatnonzero(done):
                episodes.append((float(returns[i]), int(lengths[i])))
                returns[i] = 0.0
                lengths[i] = 0
        real = ~done
    return episodes


def trainer_run(env: Any, total_steps: int, seed: int, variant: str, exp_dir: str) -> Any:
    """The whole call; with ``variant="read"``, then every record's return and length read through its dict."""
    if variant in REAL_AGENTS:
        from online_trainer.agents import AGENTS

        trainer = OnlineTrainer(env, AGENTS[variant], exp_dir=exp_dir)
        (records,) = trainer.multi_run(1, total_steps=total_steps, seed_offset=seed)
        return records
    trainer = OnlineTrainer(env, CheapAgent, exp_dir=exp_dir)  # tb and tb-plain: the default callback
    if variant in ("empty", "read", "hook"):
        trainer.call_back = EmptyCallBack()
    hooks = [EveryThousandSteps()] if variant == "hook" else None
    (records,) = trainer.multi_run(1, total_steps=total_steps, seed_offset=seed, hooks=hooks)
    if variant == "read":
        return [(r["ep_return"], r["ep_length"]) for r in records]
    return records


def time_variant(
    variant: str, num_envs: int, total_steps: int, seed: int
) -> tuple[float, float, list[tuple[float, int]], float]:
    """Wall and CPU seconds of one run of ``variant``, its episodes, and the seconds spent in ``env.step``
    (with ``--env-time``; else 0).

    The env is built and the experiment directory made before the timer starts.
    """
    env = make_env(num_envs)
    env_seconds = timed_steps(env) if ENV_TIME else [0.0]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            start, start_cpu = time.perf_counter(), time.process_time()
            if variant in ("bare", "bare-logs"):
                episodes = bare_loop(env, total_steps, seed, keep_logs=variant == "bare-logs")
            else:
                episodes = trainer_run(env, total_steps, seed, variant, tmp)
            wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    finally:
        env.close()
    if variant in ("empty", "tb", "tb-plain", "hook", *REAL_AGENTS):  # read after the timer, for the check
        episodes = [(r["ep_return"], r["ep_length"]) for r in episodes]
    return wall, cpu, episodes, env_seconds[0]


def measure(
    num_envs: int, total_steps: int, repeats: int, variants: tuple[str, ...]
) -> dict[str, dict[str, list[float]]]:
    """Wall and CPU seconds per repetition of each variant; checks every run's episodes.

    Each repetition runs the bare loop, then each other variant (in an order rotated between
    repetitions) followed by the bare loop again: a variant's ``wall_bare``/``cpu_bare`` entry is
    the mean of the two bare runs beside it. This machine's speed moves in phases of a few
    seconds; a bare run on each side cancels a drift across the pair, which one bare run per
    repetition (up to three calls away) did not. The bare runs beside a variant of
    :data:`AGENT_LOGS` keep the agent's metrics (``bare_loop(keep_logs=True)``).
    """
    times: dict[str, dict[str, list[float]]] = {
        v: {"wall": [], "cpu": [], "wall_bare": [], "cpu_bare": [], "wall_bare_runs": [], "env": [], "env_bare": []}
        for v in variants
    }
    references: dict[str, Any] = {}
    others = tuple(v for v in variants if v != "bare")

    def run(variant: str) -> tuple[float, float, float]:
        wall, cpu, episodes, env = time_variant(variant, num_envs, total_steps, seed=0)
        group = variant if variant in REAL_AGENTS else "cheap"
        reference = references.setdefault(group, episodes)
        if episodes != reference:
            raise AssertionError(f"{variant} at num_envs={num_envs}: episodes differ from the first run's")
        return wall, cpu, env

    for rep in range(repeats):
        before = run("bare")
        beside = "bare"
        if "bare" in times:
            times["bare"]["wall"].append(before[0])
            times["bare"]["cpu"].append(before[1])
            times["bare"]["env"].append(before[2])
        shift = rep % max(1, len(others))
        for variant in others[shift:] + others[:shift]:
            kind = "bare-logs" if variant in AGENT_LOGS else "bare"
            if kind != beside:
                before, beside = run(kind), kind
            wall, cpu, env = run(variant)
            times[variant]["wall"].append(wall)
            times[variant]["cpu"].append(cpu)
            times[variant]["env"].append(env)
            after = run(kind)
            times[variant]["wall_bare"].append((before[0] + after[0]) / 2)
            times[variant]["cpu_bare"].append((before[1] + after[1]) / 2)
            times[variant]["env_bare"].append((before[2] + after[2]) / 2)
            times[variant]["wall_bare_runs"] += [before[0], after[0]]
            before = after
    return times


def report(num_envs: int, total_steps: int, times: dict[str, dict[str, list[float]]]) -> None:
    """One line per variant: median us per env step and, against the bare runs beside it, extra us and ratio."""
    for variant, clocks in times.items():
        cells = [f"{num_envs:>8}", f"{total_steps:>8}", f"{variant:>8}"]
        for clock in ("wall", "cpu"):
            us = statistics.median(clocks[clock]) / total_steps * 1e6
            cells.append(f"{us:7.2f}")
            bare = clocks.get(f"{clock}_bare")
            if variant != "bare" and bare:
                extra = statistics.median(t - b for t, b in zip(clocks[clock], bare)) / total_steps * 1e6
                ratios = [t / b for t, b in zip(clocks[clock], bare)]
                low, _, high = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
                cells.append(f"{extra:+6.2f} {statistics.median(ratios):.3f} [{low:.2f}-{high:.2f}]")
                if clock == "wall":
                    cells.append(f"{min(clocks[clock]) / min(clocks['wall_bare_runs']):.3f}")
            else:
                cells.append(" " * (26 + 7 * (clock == "wall")))
        if ENV_TIME:  # how much of the extra is the env's own step, slower beside the runner's work
            cells.append(f"{statistics.median(clocks['env']) / total_steps * 1e6:7.2f}")
            if variant != "bare" and clocks["env_bare"]:
                extra = statistics.median(t - b for t, b in zip(clocks["env"], clocks["env_bare"]))
                cells.append(f"{extra / total_steps * 1e6:+6.2f}")
        print("  ".join(cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="The module's docstring says what each variant times; bench/README.md gives the figures.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--repeats", type=int, default=7, help="repetitions of every variant and setting")
    parser.add_argument(
        "--steps",
        default=",".join(f"{n}:{s}" for n, s in DEFAULT_STEPS.items()),
        help="num_envs:total_steps pairs, comma-separated",
    )
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated, from {', '.join((*VARIANTS, *REAL_AGENTS))} (dqn and ppo: the reference agents)",
    )
    parser.add_argument("--raw", help="append every repetition's seconds to this file, one JSON object a line")
    parser.add_argument(
        "--env",
        choices=ENVS,
        default="cartpole",
        help="replay: a near-free env replaying CartPole-shaped steps; its 'extra' column is the runner's own us",
    )
    parser.add_argument(
        "--env-time",
        action="store_true",
        help="also time env.step alone (bare loop and call alike): the last columns, us per env step and its extra",
    )
    args = parser.parse_args()
    global ENV, ENV_TIME
    ENV, ENV_TIME = args.env, args.env_time
    logging.basicConfig(level=logging.WARNING)
    variants = tuple(args.variants.split(","))
    unknown = sorted(set(variants) - {*VARIANTS, *REAL_AGENTS})
    if unknown:
        parser.error(f"--variants: unknown {unknown}; choose from {', '.join((*VARIANTS, *REAL_AGENTS))}")
    print(
        f"medians over {args.repeats} repetitions; extra = us per env step over the bare runs beside it;\n"
        "ratio = time / the mean of the bare runs before and after it: median [interquartile range];\n"
        "best = the variant's fastest wall time / the bare loop's fastest (noise only adds time: the quiet-machine estimate);\n"
        f"the bare runs beside {', '.join(AGENT_LOGS)} give the agent call_back=kept.append (tb-plain: as beside the others)"
    )
    print(
        f"{'num_envs':>8}  {'steps':>8}  {'':>8}  {'wall us':>7}  {'extra  ratio [range]':<26} {'best':>5}  {'cpu us':>7}  "
        f"{'extra  ratio [range]':<26}" + (f"  {'env us':>7}  extra" if ENV_TIME else "")
    )
    for pair in args.steps.split(","):
        num_envs, total_steps = (int(x) for x in pair.split(":"))
        times = measure(num_envs, total_steps, args.repeats, variants)
        report(num_envs, total_steps, times)
        if args.raw:
            with open(args.raw, "a") as f:
                f.write(json.dumps({"num_envs": num_envs, "total_steps": total_steps, "times": times}) + "\n")


if __name__ == "__main__":
    main()
