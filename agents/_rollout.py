"""PPO's rollout storage and generalised advantage estimation over masked steps.

The rollout holds ``n_steps`` consecutive env steps of every sub-env, with a ``valid`` mask.
An entry whose ``valid`` is False (the NEXT_STEP autoreset step, which is not a
transition) is kept in place but is *skipped*: it gets no advantage, enters no loss, and
GAE carries the recursion across it unchanged. Skipping is exact because such an entry
always follows the end of an episode, where the recursion is cut anyway; the next real
entry starts a new episode.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def masked_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    final_values: np.ndarray,
    valid: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """GAE(lambda) advantages and returns for ``(n_steps, num_envs)`` arrays.

    Args:
        rewards: reward of each step.
        values: value estimate of the observation each step acted on.
        terminated: episode reached a terminal state (no bootstrap).
        truncated: episode was cut by a time limit (bootstrap from ``final_values``).
        final_values: value of the true final observation where ``truncated``.
        valid: False for entries that are not transitions (skipped).
        last_values: value of the observation after the last step of the rollout.
        gamma: discount factor.
        gae_lambda: GAE's lambda.

    Returns:
        ``(advantages, returns)``, both zero where ``valid`` is False.
    """
    n_steps = rewards.shape[0]
    advantages = np.zeros_like(rewards, dtype=np.float32)
    next_value = last_values.astype(np.float32)
    next_advantage = np.zeros_like(next_value)
    for t in range(n_steps - 1, -1, -1):
        real = valid[t]
        bootstrap = np.where(truncated[t], final_values[t], next_value) * ~terminated[t]
        delta = rewards[t] + gamma * bootstrap - values[t]
        continues = ~(terminated[t] | truncated[t])
        advantage = delta + gamma * gae_lambda * continues * next_advantage
        advantages[t] = np.where(real, advantage, 0.0)
        next_value = np.where(real, values[t], next_value)
        next_advantage = np.where(real, advantage, next_advantage)
    returns = np.where(valid, advantages + values, 0.0).astype(np.float32)
    return advantages, returns


class Rollout:
    """Preallocated ``(n_steps, num_envs, ...)`` arrays filled one env step at a time.

    Args:
        n_steps: env steps per sub-env in one rollout.
        num_envs: number of sub-envs.
        obs_dim: size of the (encoded, normalised) observation features.
        action_shape: shape of one stored action.
        action_dtype: dtype of the stored actions.
    """

    FIELDS = ("obs", "actions", "log_probs", "values", "rewards", "terminated", "truncated", "final_values", "valid")

    def __init__(
        self, n_steps: int, num_envs: int, obs_dim: int, action_shape: tuple[int, ...], action_dtype: Any
    ) -> None:
        shape = (n_steps, num_envs)
        self.n_steps = n_steps
        self.obs = np.zeros((*shape, obs_dim), dtype=np.float32)
        self.actions = np.zeros((*shape, *action_shape), dtype=action_dtype)
        self.log_probs = np.zeros(shape, dtype=np.float32)
        self.values = np.zeros(shape, dtype=np.float32)
        self.rewards = np.zeros(shape, dtype=np.float32)
        self.terminated = np.zeros(shape, dtype=bool)
        self.truncated = np.zeros(shape, dtype=bool)
        self.final_values = np.zeros(shape, dtype=np.float32)
        self.valid = np.zeros(shape, dtype=bool)
        self.pos = 0

    @property
    def full(self) -> bool:
        """True when ``n_steps`` env steps are stored."""
        return self.pos == self.n_steps

    def add(self, **step: np.ndarray) -> None:
        """Store one env step (one keyword per name in :attr:`FIELDS`)."""
        t = self.pos
        for name in self.FIELDS:
            getattr(self, name)[t] = step[name]
        self.pos = t + 1

    def advantages(self, last_values: np.ndarray, gamma: float, gae_lambda: float) -> tuple[np.ndarray, np.ndarray]:
        """:func:`masked_gae` over the stored steps."""
        return masked_gae(
            self.rewards,
            self.values,
            self.terminated,
            self.truncated,
            self.final_values,
            self.valid,
            last_values,
            gamma,
            gae_lambda,
        )

    def state_dict(self) -> dict[str, Any]:
        """The stored steps (views) and the write position."""
        return {"pos": self.pos, **{name: getattr(self, name)[: self.pos] for name in self.FIELDS}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` into arrays of the same shape."""
        self.pos = int(state["pos"])
        for name in self.FIELDS:
            getattr(self, name)[: self.pos] = state[name]
