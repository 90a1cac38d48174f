"""One-step toy envs whose best action is known, for image, Dict and continuous-action agents."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class CueEnv(gym.Env):
    """One-step episodes: reward 1 for the action that the observation cues, else 0.

    ``kind="image"``: an 8x8x1 uint8 image, bright (255) in its left half for action 0 and its
    right half for action 1. ``kind="dict"``: ``{"image": that image, all dark, "cue": Discrete(2),
    "noise": Box(2)}``; the cue is the action.
    """

    def __init__(self, kind: str = "image") -> None:
        self.kind = kind
        self.action_space = gym.spaces.Discrete(2)
        image = gym.spaces.Box(0, 255, (8, 8, 1), np.uint8)
        if kind == "image":
            self.observation_space = image
        else:
            self.observation_space = gym.spaces.Dict(
                {"image": image, "cue": gym.spaces.Discrete(2), "noise": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)}
            )
        self._cue = 0

    def _obs(self):
        image = np.zeros((8, 8, 1), np.uint8)
        if self.kind == "image":
            image[:, 4 * self._cue : 4 * self._cue + 4] = 255
            return image
        noise = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return {"image": image, "cue": np.int64(self._cue), "noise": noise}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._cue = int(self.np_random.integers(2))
        return self._obs(), {}

    def step(self, action):
        reward = float(int(action) == self._cue)
        return self._obs(), reward, True, False, {}


class TargetEnv(gym.Env):
    """One-step episodes with a continuous action: reward ``-(a - 2x)^2`` for an observed ``x`` in
    [-1, 1] and an action in [-2, 2]; the best action is ``2x`` (return 0)."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
        self._x = 0.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._x = float(self.np_random.uniform(-1, 1))
        return np.array([self._x], np.float32), {}

    def step(self, action):
        reward = -float((float(np.asarray(action).reshape(-1)[0]) - 2 * self._x) ** 2)
        return np.array([self._x], np.float32), reward, True, False, {}


def vector(env_cls, num_envs: int = 2, **kwargs) -> gym.vector.SyncVectorEnv:
    """A NEXT_STEP SyncVectorEnv of ``num_envs`` copies."""
    return gym.vector.SyncVectorEnv([lambda: env_cls(**kwargs) for _ in range(num_envs)])
