"""Evaluating a trained agent through the trainer (``train=False``) gives its true greedy returns.

The reference is a hand-written greedy loop on a plain env reset with the same seed: an agent
evaluated through the trainer must score exactly what it scores there, whether it is the
trained instance itself, or a fresh agent that loads ``Run1_Last`` or ``Run1_Best_agent.t``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from agents import PPOAgent, QLearningAgent
from online_trainer import OnlineTrainer

EVAL_SEED = 12345
EVAL_EPISODES = 5


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Small networks on a shared machine: one thread is several times faster than two."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def greedy_returns(agent, env_id: str, seed: int, episodes: int) -> list[float]:
    """Returns of ``episodes`` greedy episodes on ``gym.make(env_id)``, the first reset with ``seed``."""
    agent.eval()
    env = gym.make(env_id)
    returns = []
    obs, _ = env.reset(seed=seed)
    for _ in range(episodes):
        total, done = 0.0, False
        while not done:
            action = agent.act(np.asarray(obs)[None])[0]
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
        obs, _ = env.reset()
    env.close()
    return returns


def through_trainer(agent_or_factory, env_id: str) -> list[float]:
    (records,) = OnlineTrainer(lambda: gym.make_vec(env_id, num_envs=1), agent_or_factory, train=False).multi_run(
        1, num_episodes=EVAL_EPISODES, seed_offset=EVAL_SEED, progress=False)
    return [r["ep_return"] for r in records]


def loading(cls, path):
    def factory(env):
        agent = cls(env)
        agent.load(path)
        return agent
    return factory


def loading_best(cls, path):
    def factory(env):
        agent = cls(env)
        agent.load(torch.load(path, weights_only=True))
        return agent
    return factory


CASES = {
    "q_learning": (QLearningAgent, "CliffWalking-v1", {"num_episodes": 150},
                   {"lr": 0.5, "epsilon_decay": 0.95, "decay_unit": "episode"}),
    "ppo": (PPOAgent, "CartPole-v1", {"total_steps": 6000},
            {"lr": 1e-3, "n_steps": 128, "n_epochs": 4, "minibatch_size": 64}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_trained_agent_scores_through_the_trainer_what_it_scores_by_hand(tmp_path, name):
    cls, env_id, budget, hp = CASES[name]
    trainer = OnlineTrainer(lambda: gym.make_vec(env_id, num_envs=1), lambda env: cls(env, **hp), exp_dir=tmp_path)
    trainer.multi_run(1, seed_offset=0, checkpoint_freq=10**9, progress=False, **budget)
    (trained,) = trainer.agents
    state_before = trained.save()

    by_hand = greedy_returns(trained, env_id, EVAL_SEED, EVAL_EPISODES)
    untrained = greedy_returns(cls(gym.make_vec(env_id, num_envs=1), **hp), env_id, EVAL_SEED, EVAL_EPISODES)
    assert by_hand != untrained  # the test can tell a trained agent from a fresh one

    assert through_trainer(trained, env_id) == by_hand
    after = trained.save()
    assert after["steps"] == state_before["steps"]  # evaluation neither reset nor trained it
    assert through_trainer(loading(cls, tmp_path / "Run1_Last"), env_id) == by_hand

    best = cls(gym.make_vec(env_id, num_envs=1), **hp)
    best.load(torch.load(tmp_path / "Run1_Best_agent.t", weights_only=True))
    assert through_trainer(loading_best(cls, tmp_path / "Run1_Best_agent.t"), env_id) == greedy_returns(
        best, env_id, EVAL_SEED, EVAL_EPISODES)


def test_evaluation_never_calls_reset_nor_update():
    class Trained:
        def __init__(self):
            self.calls = []

        def reset(self, seed):
            self.calls.append("reset")

        def train(self):
            self.calls.append("train")

        def eval(self):
            self.calls.append("eval")

        def act(self, obs):
            return np.zeros(len(obs), dtype=np.int64)

        def update(self, *args, **kwargs):
            self.calls.append("update")

    agent = Trained()
    OnlineTrainer(gym.make_vec("CartPole-v1", num_envs=2), agent, train=False).multi_run(
        2, num_episodes=4, seed_offset=0, progress=False)
    assert agent.calls == []  # two runs in this process: each evaluated a copy; the instance is untouched
    OnlineTrainer(gym.make_vec("CartPole-v1", num_envs=2), agent, train=False).multi_run(
        1, num_episodes=4, seed_offset=0, progress=False)
    assert agent.calls == ["eval"]
