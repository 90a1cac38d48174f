"""The checks of an agent's first actions against the env's action space (errors before the first env step)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from online_trainer.loop.factories import check_actions


class Acts(gym.Env):
    """An env of any action space; only its spaces are read."""

    observation_space = spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)

    def __init__(self, action_space: spaces.Space) -> None:
        self.action_space = action_space

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        return np.zeros(1, dtype=np.float32), 0.0, False, False, {}


class Agent:
    pass


@pytest.mark.parametrize(
    "space, actions, fix",
    [
        (spaces.Discrete(3, start=-1), [2, 2], "return one integer per sub-env, from -1 to 1."),
        (
            spaces.MultiDiscrete([2, 3], start=[1, 0]),
            [[1, 0], [3, 0]],
            "return one array per sub-env, each entry from its low [1, 0] to its high [2, 2].",
        ),
        (spaces.MultiBinary(2), [[0, 1], [2, 0]], "return one array of 0s and 1s per sub-env."),
    ],
)
def test_integer_actions_outside_their_space_are_refused_saying_which_values_it_holds(space, actions, fix):
    """E17: the message named the actions and the space, but not what to return instead."""
    env = gym.vector.SyncVectorEnv([lambda: Acts(space)] * 2)
    with pytest.raises(ValueError) as raised:
        check_actions(np.array(actions), env, Agent())
    assert (
        str(raised.value) == f"The agent Agent's act(obs) returned {actions}, outside the action space {space}: {fix}"
    )
    check_actions(np.array([space.sample() for _ in range(2)]), env, Agent())  # what the space holds passes
