"""Tabular Q-learning with epsilon-greedy exploration, vectorised over sub-envs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from online_trainer.agents._base import AgentBase, require

EVAL_STREAM = 7_919
"""Second word of the seed of the eval-mode tie-breaking generator (the training one has none)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class QLearningConfig:
    """Hyperparameters of :class:`QLearningAgent`."""

    lr: float = 0.1
    """Step size of the update ``Q[s, a] += lr * (target - Q[s, a])``."""
    gamma: float = 0.99
    """Discount factor."""
    epsilon: float = 1.0
    """Initial exploration rate (setting it with ``set_hp`` also sets the current rate)."""
    epsilon_min: float = 0.05
    """Floor of the exploration rate."""
    epsilon_decay: float = 0.99
    """Multiplicative decay: ``epsilon = max(epsilon_min, epsilon * epsilon_decay)`` once per unit."""
    decay_unit: str = "episode"
    """``"episode"``: decay once per finished episode (any sub-env); ``"step"``: once per real transition."""
    q_init: float = 0.0
    """Initial value of every table entry (optimistic values explore more)."""
    log_step_values: bool = False
    """When True, :meth:`QLearningAgent.log` returns per-sub-env ``q`` and ``td_error`` each step."""

    def __post_init__(self) -> None:
        require(self.lr > 0, "lr", self.lr, "> 0")
        require(0 <= self.gamma <= 1, "gamma", self.gamma, "in [0, 1]")
        require(0 <= self.epsilon <= 1, "epsilon", self.epsilon, "in [0, 1]")
        require(0 <= self.epsilon_min <= 1, "epsilon_min", self.epsilon_min, "in [0, 1]")
        require(0 < self.epsilon_decay <= 1, "epsilon_decay", self.epsilon_decay, "in (0, 1]")
        require(self.decay_unit in ("episode", "step"), "decay_unit", self.decay_unit, "'episode' or 'step'")


def _discrete(space: gym.Space, name: str) -> gym.spaces.Discrete:
    """``space`` itself, checked to be ``Discrete`` (``name``: observation or action)."""
    if not isinstance(space, gym.spaces.Discrete):
        raise ValueError(f"QLearningAgent needs a Discrete {name} space but got {name}_space={space}.")
    return space


class QLearningAgent(AgentBase):
    """Tabular Q-learning for ``Discrete`` observation and action spaces.

    Suits FrozenLake, Taxi, CliffWalking and the ``Corridor-v0`` toy env. The target is
    ``r + gamma * max_a' Q[s', a']``, without the bootstrap term when the episode
    *terminated* (a truncated episode bootstraps from its true final observation).
    Epsilon decays multiplicatively per finished episode or per real transition
    (``decay_unit``) and is shared by all sub-envs. Ties between equal Q-values are broken
    at random, in training and in :meth:`eval` (greedy) mode.

    All sub-envs are updated at once with ``np.add.at``: when several sub-envs update the
    same ``(s, a)`` in one step, their TD increments (computed from the same table) add up.
    Entries with ``valid`` False (the autoreset step) never touch the table.

    Args:
        env: gymnasium ``VectorEnv`` (or ``Env``) with ``Discrete`` spaces.
        seed: seed used until :meth:`reset` is called.
        **hyperparameters: fields of :class:`QLearningConfig`.
    """

    Config = QLearningConfig

    def _check_spaces(self) -> None:
        obs_space, act_space = _discrete(self.observation_space, "observation"), _discrete(self.action_space, "action")
        self._obs_start = int(obs_space.start)
        self._act_start = int(act_space.start)
        self._table_shape = (int(obs_space.n), int(act_space.n))

    def _build(self) -> None:
        self._eval_rng = np.random.default_rng([0 if self._seed is None else self._seed, EVAL_STREAM])
        self.q_table = np.full(self._table_shape, self.config.q_init, dtype=np.float64)
        self.epsilon = float(self.config.epsilon)
        self.episodes = 0
        self._resize(self.num_envs)

    def _resize(self, num_envs: int) -> None:
        self._pending: tuple[np.ndarray, np.ndarray] | None = None
        self._last_log: dict[str, np.ndarray] | None = None
        self._last_valid = np.zeros(num_envs, dtype=bool)

    def _apply_config(self, changed: set[str]) -> None:
        if "epsilon" in changed:
            self.epsilon = float(self.config.epsilon)

    def _states(self, obs: np.ndarray) -> np.ndarray:
        return np.asarray(obs, dtype=np.int64).reshape(-1) - self._obs_start

    def greedy(self, states: np.ndarray) -> np.ndarray:
        """Greedy action indices (ties broken at random) for table rows ``states``.

        In eval mode ties are broken with a generator of their own, re-seeded at each
        :meth:`eval`, so that evaluating never draws from the training generator (training
        is the same with and without evaluations) and every evaluation of the same table
        acts the same (evaluating a saved checkpoint repeats the evaluation made at that point).
        """
        q = self.q_table[states]
        best = q == q.max(axis=1, keepdims=True)
        rng = self.np_rng if self.training else self._eval_rng
        return np.where(best, rng.random(q.shape), -1.0).argmax(axis=1)

    def eval(self) -> None:
        """Switch to greedy acting (``update`` is then ignored), with a fresh tie-breaking generator."""
        super().eval()
        self._eval_rng = np.random.default_rng([0 if self._seed is None else self._seed, EVAL_STREAM])

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Epsilon-greedy actions in training mode, greedy ones after :meth:`eval`."""
        states = self._states(obs)
        actions = self.greedy(states)
        if self.training:
            explore = self.np_rng.random(states.shape[0]) < self.epsilon
            random_actions = self.np_rng.integers(self.q_table.shape[1], size=states.shape[0])
            actions = np.where(explore, random_actions, actions)
            self._pending = (states, actions)
        return actions + self._act_start

    def update(
        self,
        next_obs: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        call_back: Callable[[dict[str, Any]], None] | None = None,
        valid: np.ndarray | None = None,
    ) -> None:
        """Apply the Q-learning update to the real transitions of this step.

        Raises:
            RuntimeError: when called in training mode without a preceding :meth:`act`.
        """
        step = self._pending_step(valid)
        if step is None:
            return
        (states, actions), real = step
        next_states = self._states(next_obs)
        terminated = np.asarray(terminated, dtype=bool)
        bootstrap = self.q_table[next_states].max(axis=1) * ~terminated
        td_error = np.asarray(reward, dtype=np.float64) + self.config.gamma * bootstrap - self.q_table[states, actions]
        np.add.at(self.q_table, (states[real], actions[real]), self.config.lr * td_error[real])
        n_real = int(np.count_nonzero(real))
        self.steps += n_real
        if self.config.decay_unit == "step":
            decays = n_real
        else:
            decays = int(np.count_nonzero(real & (terminated | np.asarray(truncated, dtype=bool))))
            self.episodes += decays
        if decays:
            self.epsilon = max(self.config.epsilon_min, self.epsilon * self.config.epsilon_decay**decays)
        if self.config.log_step_values:
            self._last_valid = real
            self._last_log = {"q": self.q_table[states, actions], "td_error": td_error}

    def log(self) -> list[dict[str, np.ndarray] | None] | None:
        """Per-sub-env ``q`` and ``td_error`` of the last update (``log_step_values`` only)."""
        if self._last_log is None or not self.training or not self.config.log_step_values:
            return None
        q, td = self._last_log["q"], self._last_log["td_error"]
        return [
            {"q": q[i : i + 1], "td_error": td[i : i + 1]} if self._last_valid[i] else None
            for i in range(self.num_envs)
        ]

    def _state(self) -> dict[str, Any]:
        return {"q_table": self.q_table, "epsilon": self.epsilon, "episodes": self.episodes}

    def _load_state(self, state: dict[str, Any]) -> None:
        self.q_table = state["q_table"]
        self.epsilon = float(state["epsilon"])
        self.episodes = int(state["episodes"])
