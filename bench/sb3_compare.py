"""Wall time per seed against Stable-Baselines3, at rl-baselines3-zoo's hyperparameters.

PPO and DQN on CartPole-v1, SAC on Pendulum-v1. Each seed of each library trains in a fresh
process (``--child``), with torch on one thread; the two libraries alternate which goes first
in each pair. Timed: building the env and the agent/model, and training, as a user runs them:
ours through ``OnlineTrainer(...).multi_run(1, total_steps=N)`` into a temporary experiment
directory (every default on: records streamed, TensorBoard callback), SB3 through
``model.learn(N)`` (no logger output). After training, each child plays 10 greedy episodes of
its final policy (seeds 1000-1009), not timed. The ratio is ours / SB3 within a pair.

Needs ``pip install stable-baselines3`` (after ``pip install torch==2.13.0``; check that it
keeps that torch). Budgets default to the zoo's for PPO (100k) and DQN (50k), and to 5k steps
for SAC (the zoo: 20k) so that a pair fits a few minutes on 2 cores::

    python bench/sb3_compare.py [--algos ppo dqn sac] [--pairs 3] [--steps ppo=100000 ...]
    python bench/sb3_compare.py --phases    # DQN's and SAC's gradient phases alone, in one process
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time

import numpy as np

ENV_IDS = {"ppo": "CartPole-v1", "dqn": "CartPole-v1", "sac": "Pendulum-v1"}
NUM_ENVS = {"ppo": 8, "dqn": 1, "sac": 1}
STEPS = {"ppo": 100_000, "dqn": 50_000, "sac": 5_000}


def ours_kwargs(algo: str, steps: int) -> dict:
    """The zoo's hyperparameters in our agents' names."""
    if algo == "ppo":  # our value loss is 0.5 * MSE: vf_coef 1.0 is SB3's 0.5
        return dict(
            lr="lin_0.001",
            clip_coef="lin_0.2",
            total_steps=steps,
            n_steps=32,
            minibatch_size=256,
            n_epochs=20,
            gamma=0.98,
            gae_lambda=0.8,
            ent_coef=0.0,
            vf_coef=1.0,
            max_grad_norm=0.5,
            hidden_sizes=(64, 64),
            activation="tanh",
        )
    if algo == "dqn":
        return dict(
            lr=2.3e-3,
            batch_size=64,
            buffer_size=100_000,
            learning_starts=1000,
            gamma=0.99,
            target_update_interval=10,
            train_freq=256,
            gradient_steps=128,
            epsilon_start=1.0,
            epsilon_end=0.04,
            exploration_steps=int(0.16 * steps),
            hidden_sizes=(256, 256),
            double_dqn=False,
            max_grad_norm=10.0,
            loss="huber",
        )
    return dict(lr=1e-3)  # SAC: SB3's defaults otherwise, which are ours


def sb3_model(algo: str, env, seed: int):
    """The zoo's hyperparameters in SB3."""
    import stable_baselines3 as sb3

    if algo == "ppo":

        def lin(start):
            return lambda progress_remaining: start * progress_remaining

        return sb3.PPO(
            "MlpPolicy",
            env,
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate=lin(0.001),
            clip_range=lin(0.2),
            seed=seed,
            verbose=0,
            device="cpu",
        )
    if algo == "dqn":
        return sb3.DQN(
            "MlpPolicy",
            env,
            learning_rate=2.3e-3,
            batch_size=64,
            buffer_size=100_000,
            learning_starts=1000,
            gamma=0.99,
            target_update_interval=10,
            train_freq=256,
            gradient_steps=128,
            exploration_fraction=0.16,
            exploration_final_eps=0.04,
            policy_kwargs=dict(net_arch=[256, 256]),
            seed=seed,
            verbose=0,
            device="cpu",
        )
    return sb3.SAC("MlpPolicy", env, learning_rate=1e-3, seed=seed, verbose=0, device="cpu")


def greedy(act, env_id: str, episodes: int = 10) -> float:
    """Mean return of ``episodes`` episodes of ``act(obs_batch) -> actions`` on a fresh env."""
    import gymnasium as gym

    env = gym.make(env_id)
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=1000 + i)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs[None])[0])
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def child(lib: str, algo: str, seed: int, steps: int) -> dict:
    import torch

    torch.set_num_threads(1)
    import gymnasium as gym

    env_id = ENV_IDS[algo]
    if lib == "ours":
        from online_trainer import OnlineTrainer
        from online_trainer.agents import AGENTS

        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            trainer = OnlineTrainer(
                lambda: gym.make_vec(env_id, num_envs=NUM_ENVS[algo], vectorization_mode="sync"),
                lambda env: AGENTS[algo](env, **ours_kwargs(algo, steps)),
                exp_dir=tmp,
            )
            trainer.multi_run(1, total_steps=steps, seed_offset=seed, progress=False)
            wall = time.perf_counter() - start
        agent = trainer.agents[0]
        agent.eval()
        agent.set_num_env(1)
        return {"wall": wall, "greedy": greedy(agent.act, env_id)}
    from stable_baselines3.common.env_util import make_vec_env

    start = time.perf_counter()
    model = sb3_model(algo, make_vec_env(env_id, n_envs=NUM_ENVS[algo], seed=seed), seed)
    model.learn(steps)
    wall = time.perf_counter() - start
    return {"wall": wall, "greedy": greedy(lambda obs: model.predict(obs, deterministic=True)[0], env_id)}


def gradient_phases(repeats: int = 8) -> None:
    """Time the gradient phases alone, in one process, alternating ours and SB3's on filled buffers:
    DQN's 128 gradient steps of a training round, and 50 SAC gradient steps."""
    import gymnasium as gym
    import torch
    from stable_baselines3.common.env_util import make_vec_env

    from online_trainer.agents import DQNAgent, SACAgent

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    for algo, n_steps, batch in (("dqn", 128, 64), ("sac", 50, 256)):
        env_id = ENV_IDS[algo]
        env = gym.make_vec(env_id, num_envs=1, vectorization_mode="sync")
        if algo == "dqn":
            ours = DQNAgent(env, seed=0, **ours_kwargs("dqn", STEPS["dqn"]))
        else:
            ours = SACAgent(env, seed=0, lr=1e-3, learning_starts=1000)
        dim = env.single_observation_space.shape[0]
        for _ in range(3000 if algo == "dqn" else 999):
            obs = rng.normal(size=(1, dim)).astype(np.float32)
            ours.act(obs)
            ours.update(obs, np.ones(1), np.zeros(1, bool), np.zeros(1, bool))
        model = sb3_model(algo, make_vec_env(env_id, n_envs=1, seed=0), 0)
        model.learning_starts = 1000
        model.learn(3000 if algo == "dqn" else 1000)
        times: dict[str, list[float]] = {"ours": [], "sb3": []}
        for rep in range(repeats):
            for lib in ("ours", "sb3") if rep % 2 == 0 else ("sb3", "ours"):
                start = time.perf_counter()
                if lib == "ours":
                    ours._train(n_steps, None)
                else:
                    model.train(gradient_steps=n_steps, batch_size=batch)
                times[lib].append(time.perf_counter() - start)
        ratios = np.array(times["ours"]) / np.array(times["sb3"])
        print(
            f"{algo}: {n_steps} gradient steps, ours {1e3 * np.median(times['ours']):.1f} ms, SB3 "
            f"{1e3 * np.median(times['sb3']):.1f} ms; ratio median {np.median(ratios):.3f} "
            f"[{ratios.min():.3f}-{ratios.max():.3f}] over {repeats} pairs",
            flush=True,
        )


def run_child(lib: str, algo: str, seed: int, steps: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", lib, "--algo", algo, "--seed", str(seed), "--budget", str(steps)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="*", default=["ppo", "dqn", "sac"], choices=sorted(ENV_IDS))
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0, help="seed of the first pair (then one more a pair)")
    parser.add_argument("--steps", nargs="*", default=[], help="budgets as algo=steps")
    parser.add_argument("--child", choices=["ours", "sb3"])
    parser.add_argument("--algo", choices=sorted(ENV_IDS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=int)
    parser.add_argument("--phases", action="store_true", help="time the gradient phases alone, in one process")
    args = parser.parse_args()
    if args.phases:
        gradient_phases()
        return
    if args.child:
        print(json.dumps(child(args.child, args.algo, args.seed, args.budget)))
        return
    steps = {**STEPS, **{k: int(v) for k, v in (item.split("=") for item in args.steps)}}
    results: dict[str, list[tuple[dict, dict]]] = {algo: [] for algo in args.algos}
    for pair in range(args.pairs):
        for algo in args.algos:
            order = ("ours", "sb3") if pair % 2 == 0 else ("sb3", "ours")
            got = {lib: run_child(lib, algo, args.first_seed + pair, steps[algo]) for lib in order}
            results[algo].append((got["ours"], got["sb3"]))
            print(
                f"{algo} pair {pair}: ours {got['ours']['wall']:.1f} s (greedy {got['ours']['greedy']:.1f}), "
                f"SB3 {got['sb3']['wall']:.1f} s (greedy {got['sb3']['greedy']:.1f}), "
                f"ratio {got['ours']['wall'] / got['sb3']['wall']:.3f}",
                flush=True,
            )
    print(
        "| algo, env, steps | pairs | ours s per seed (median) | SB3 s per seed (median) | ratio median [min-max] "
        "| greedy return ours (mean) | greedy return SB3 (mean) |"
    )
    print("|---|---|---|---|---|---|---|")
    for algo, pairs in results.items():
        ratios = [o["wall"] / s["wall"] for o, s in pairs]
        print(
            f"| {algo.upper()}, {ENV_IDS[algo]}, {steps[algo] // 1000}k | {len(pairs)} | "
            f"{np.median([o['wall'] for o, _ in pairs]):.1f} | {np.median([s['wall'] for _, s in pairs]):.1f} | "
            f"{np.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}] | "
            f"{np.mean([o['greedy'] for o, _ in pairs]):.1f} | {np.mean([s['greedy'] for _, s in pairs]):.1f} |"
        )


if __name__ == "__main__":
    main()
