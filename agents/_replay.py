"""A preallocated circular replay buffer of numpy arrays."""

from __future__ import annotations

from typing import Any

import numpy as np


class ReplayBuffer:
    """Circular buffer of ``(obs, action, reward, next_obs, terminated)`` transitions.

    Args:
        capacity: number of transitions kept; the oldest are overwritten.
        obs_shape: shape of one observation.
        obs_dtype: dtype observations are stored with (that of the observation space).
        action_shape: shape of one action (``()`` for a discrete action).
        action_dtype: dtype actions are stored with.
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        obs_dtype: Any,
        action_shape: tuple[int, ...] = (),
        action_dtype: Any = np.int64,
    ) -> None:
        self.capacity = int(capacity)
        self.obs = np.zeros((self.capacity, *obs_shape), dtype=obs_dtype)
        self.next_obs = np.zeros_like(self.obs)
        self.actions = np.zeros((self.capacity, *action_shape), dtype=action_dtype)
        self.rewards = np.zeros(self.capacity, dtype=np.float32)
        self.terminated = np.zeros(self.capacity, dtype=bool)
        self.pos = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
    ) -> None:
        """Append a batch of transitions (the first axis indexes them)."""
        n = len(actions)
        if n == 0:
            return
        if n > self.capacity:
            obs, actions, rewards = obs[-self.capacity :], actions[-self.capacity :], rewards[-self.capacity :]
            next_obs, terminated = next_obs[-self.capacity :], terminated[-self.capacity :]
            n = self.capacity
        idx = (self.pos + np.arange(n)) % self.capacity
        self.obs[idx] = obs
        self.next_obs[idx] = next_obs
        self.actions[idx] = actions
        self.rewards[idx] = rewards
        self.terminated[idx] = terminated
        self.pos = int((self.pos + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)

    def sample(self, rng: np.random.Generator, batch_size: int) -> dict[str, np.ndarray]:
        """Draw ``batch_size`` transitions uniformly with replacement using ``rng``."""
        idx = rng.integers(self.size, size=batch_size)
        return {
            "obs": self.obs[idx],
            "actions": self.actions[idx],
            "rewards": self.rewards[idx],
            "next_obs": self.next_obs[idx],
            "terminated": self.terminated[idx],
        }

    def state_dict(self, with_data: bool = True) -> dict[str, Any]:
        """Counters, and the stored transitions when ``with_data`` (views, not copies)."""
        state: dict[str, Any] = {"pos": self.pos, "size": self.size}
        if with_data:
            n = self.size
            state.update(
                obs=self.obs[:n],
                next_obs=self.next_obs[:n],
                actions=self.actions[:n],
                rewards=self.rewards[:n],
                terminated=self.terminated[:n],
            )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; without data the buffer restarts empty."""
        if "obs" not in state:
            self.pos = self.size = 0
            return
        n = int(state["size"])
        if n > self.capacity:
            raise ValueError(f"The saved buffer holds {n} transitions but capacity={self.capacity}.")
        for name in ("obs", "next_obs", "actions", "rewards", "terminated"):
            getattr(self, name)[:n] = state[name]
        self.pos, self.size = int(state["pos"]), n
