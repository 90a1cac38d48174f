"""RandomAgent: any action space, batched, seeded privately."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from online_trainer.agents import RandomAgent


class _SpacesEnv(gym.Env):
    def __init__(self, action_space: gym.Space) -> None:
        self.observation_space = spaces.Discrete(2)
        self.action_space = action_space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        return 0, 0.0, False, False, {}


ACTION_SPACES = [
    spaces.Discrete(3, start=2),
    spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32),
    spaces.MultiDiscrete([2, 5]),
    spaces.MultiBinary(4),
    spaces.Tuple((spaces.Discrete(2), spaces.Box(0.0, 1.0, shape=(3,), dtype=np.float32))),
    spaces.Dict({"move": spaces.Discrete(4), "power": spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)}),
]


def vector_env(space: gym.Space, num_envs: int) -> gym.vector.VectorEnv:
    return gym.vector.SyncVectorEnv([lambda: _SpacesEnv(space) for _ in range(num_envs)])


@pytest.mark.parametrize("space", ACTION_SPACES, ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("num_envs", [1, 3])
def test_actions_are_a_batch_in_the_vector_action_space(space, num_envs):
    env = vector_env(space, num_envs)
    agent = RandomAgent(env)
    agent.reset(0)
    obs, _ = env.reset(seed=0)
    for _ in range(5):
        actions = agent.act(obs)
        assert env.action_space.contains(actions)
        env.step(actions)


@pytest.mark.parametrize("space", ACTION_SPACES, ids=lambda s: type(s).__name__)
def test_state_round_trip_covers_nested_spaces(space):
    env = vector_env(space, 2)
    agent = RandomAgent(env)
    agent.reset(4)
    state = agent.save()
    first = [agent.act(None) for _ in range(3)]
    agent.load(state)
    again = [agent.act(None) for _ in range(3)]
    assert repr(first) == repr(again)


def test_the_envs_own_action_space_is_not_reseeded():
    env = vector_env(spaces.Discrete(10), 2)
    env.action_space.seed(1)
    expected = gym.vector.utils.batch_space(spaces.Discrete(10), 2)
    expected.seed(1)
    agent = RandomAgent(env)
    agent.reset(0)
    agent.act(None)
    np.testing.assert_array_equal(env.action_space.sample(), expected.sample())


def test_update_learns_nothing_but_counts_real_steps(corridor):
    env = corridor(3)
    agent = RandomAgent(env)
    agent.update(None, np.zeros(3), np.zeros(3, bool), np.zeros(3, bool), valid=np.array([True, False, True]))
    assert agent.steps == 2
    assert agent.log() is None
