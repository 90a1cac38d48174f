"""Corridor-v0: known optimal return and episode lengths, truncation, seeding."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from online_trainer import envs
from online_trainer.envs import CORRIDOR_ID, MAX_EPISODE_STEPS, CorridorEnv, optimal_episode_length, optimal_return


def rollout(env: gym.Env, policy, seed: int | None = 0) -> tuple[float, int, bool, bool]:
    """(return, length, terminated, truncated) of one episode."""
    obs, _ = env.reset(seed=seed)
    total, length = 0.0, 0
    while True:
        obs, reward, terminated, truncated, _ = env.step(policy(obs))
        total += reward
        length += 1
        if terminated or truncated:
            return total, length, terminated, truncated


@pytest.mark.parametrize("length", [2, 5, 10, 37])
def test_always_right_is_optimal(length):
    env = gym.make(CORRIDOR_ID, length=length)
    ret, steps, terminated, truncated = rollout(env, lambda obs: 1)
    assert ret == optimal_return(length) == -(length - 1)
    assert steps == optimal_episode_length(length) == length - 1
    assert terminated and not truncated


def test_default_length_constants():
    assert optimal_return() == -(envs.DEFAULT_LENGTH - 1)
    assert gym.spec(CORRIDOR_ID).max_episode_steps == MAX_EPISODE_STEPS == 100


def test_episode_is_truncated_at_the_time_limit():
    env = gym.make(CORRIDOR_ID, length=5)
    ret, steps, terminated, truncated = rollout(env, lambda obs: 0)
    assert (ret, steps, terminated, truncated) == (-100.0, 100, False, True)


def test_left_at_the_start_stays_put_and_observations_are_cells():
    env = CorridorEnv(length=4)
    obs, _ = env.reset(seed=0)
    assert obs == 0 and env.observation_space == gym.spaces.Discrete(4)
    assert env.step(0)[0] == 0
    assert [env.step(1)[0] for _ in range(3)] == [1, 2, 3]


def test_vectorised_lengths_match_the_optimum():
    vec = gym.make_vec(CORRIDOR_ID, num_envs=3, length=6)
    vec.reset(seed=0)
    for _ in range(optimal_episode_length(6) - 1):
        _, _, terminated, _, _ = vec.step(np.ones(3, dtype=np.int64))
        assert not terminated.any()
    _, reward, terminated, truncated, _ = vec.step(np.ones(3, dtype=np.int64))
    assert terminated.all() and not truncated.any() and reward.tolist() == [-1.0] * 3
    vec.close()


def test_same_seed_same_episodes_with_slip():
    def trajectory(seed):
        env = gym.make(CORRIDOR_ID, length=8, slip=0.3)
        obs, _ = env.reset(seed=seed)
        seen = [int(obs)]
        for _ in range(40):
            obs, *_ = env.step(1)
            seen.append(int(obs))
        return seen

    assert trajectory(3) == trajectory(3)
    assert trajectory(3) != trajectory(4)


def test_passes_gymnasiums_env_checker():
    check_env(CorridorEnv(length=5, slip=0.1), skip_render_check=True)


def test_ansi_render_shows_the_agent():
    env = gym.make(CORRIDOR_ID, length=4, render_mode="ansi")
    env.reset(seed=0)
    env.step(1)
    assert env.render() == ".A.G"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"length": 1}, "length must be >= 2 but got length=1"),
        ({"slip": 1.5}, r"slip must be in \[0, 1\] but got slip=1.5"),
        ({"render_mode": "human"}, "render_mode must be None or one of"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CorridorEnv(**kwargs)


def test_bad_action_is_named():
    env = CorridorEnv()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action must be 0 .left. or 1 .right. but got action=2"):
        env.step(2)


def test_registration_is_idempotent():
    envs.register_corridor()
    envs.register_corridor()
    assert CORRIDOR_ID in gym.registry
