"""A corridor of cells: walk right to the end. Its optimal return is known exactly."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

CORRIDOR_ID = "Corridor-v0"
"""Gymnasium id under which :class:`CorridorEnv` is registered on ``import online_trainer.envs``."""
DEFAULT_LENGTH = 10
"""Default number of cells."""
MAX_EPISODE_STEPS = 100
"""Time limit of the registered env (episodes are truncated after this many steps)."""
LEFT, RIGHT = 0, 1
"""The two actions."""


def optimal_return(length: int = DEFAULT_LENGTH) -> float:
    """Best achievable return of a ``length``-cell corridor (without slip): ``-(length - 1)``."""
    return -float(optimal_episode_length(length))


def optimal_episode_length(length: int = DEFAULT_LENGTH) -> int:
    """Steps of an optimal episode of a ``length``-cell corridor: ``length - 1``."""
    return int(length) - 1


class CorridorEnv(gym.Env[np.int64, np.int64]):
    """A chain of ``length`` cells; the agent starts in cell 0 and must reach the last one.

    Observation: the cell index (``Discrete(length)``). Actions: 0 = left (staying put in
    cell 0), 1 = right. Reward: -1 per step. The episode terminates on reaching cell
    ``length - 1``; the registered ``Corridor-v0`` truncates it after
    :data:`MAX_EPISODE_STEPS` steps. With ``slip > 0`` each action is replaced by the
    opposite one with that probability (drawn from the env's seeded generator); without
    slip the env is deterministic and the optimal return is :func:`optimal_return`.

    Args:
        length: number of cells (at least 2).
        slip: probability that an action is reversed.
        render_mode: None or ``"ansi"``.

    Raises:
        ValueError: for a length below 2, a slip outside [0, 1], or an unknown render mode.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, length: int = DEFAULT_LENGTH, slip: float = 0.0, render_mode: str | None = None) -> None:
        if int(length) < 2:
            raise ValueError(f"length must be >= 2 but got length={length!r}.")
        if not 0.0 <= slip <= 1.0:
            raise ValueError(f"slip must be in [0, 1] but got slip={slip!r}.")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be None or one of {self.metadata['render_modes']} "
                f"but got render_mode={render_mode!r}."
            )
        self.length = int(length)
        self.slip = float(slip)
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Discrete(self.length)
        self.action_space = gym.spaces.Discrete(2)
        self._position = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.int64, dict]:
        super().reset(seed=seed)
        self._position = 0
        return np.int64(self._position), {}

    def step(self, action: int | np.integer) -> tuple[np.int64, float, bool, bool, dict]:
        if not self.action_space.contains(action):
            raise ValueError(f"action must be 0 (left) or 1 (right) but got action={action!r}.")
        move = 1 if int(action) == RIGHT else -1
        if self.slip and self.np_random.random() < self.slip:
            move = -move
        self._position = min(max(self._position + move, 0), self.length - 1)
        terminated = self._position == self.length - 1
        return np.int64(self._position), -1.0, terminated, False, {}

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        cells = ["A" if i == self._position else "." for i in range(self.length - 1)]
        return "".join(cells) + ("A" if self._position == self.length - 1 else "G")


def register_corridor() -> None:
    """Register ``Corridor-v0`` with gymnasium (a no-op when it already is)."""
    if CORRIDOR_ID not in gym.registry:
        gym.register(
            id=CORRIDOR_ID, entry_point="online_trainer.envs._corridor:CorridorEnv", max_episode_steps=MAX_EPISODE_STEPS
        )
