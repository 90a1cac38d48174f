"""The agent protocol: what :class:`~online_trainer.OnlineTrainer` calls on an agent.

The protocol is duck-typed; :class:`Agent` documents it for type checkers and readers.
Only ``act`` and ``update`` are required. Every other method is called when present.

Every array an agent receives or returns is batched over the sub-envs of the vector env:
``obs[i]`` belongs to sub-env ``i``.

Real transitions and the autoreset step
---------------------------------------
Gymnasium 1.x vector envs reset finished sub-envs in one of three ways. The trainer hides
the difference: in every mode ``update`` receives, for each sub-env, the observation that
its action led to (the true final observation when an episode ends, never the reset one),
with ``terminated`` and ``truncated`` kept apart.

Under ``AutoresetMode.NEXT_STEP`` (gymnasium's default) the step after an episode ends
ignores that sub-env's action and returns the reset observation with reward 0 and both
flags False. That entry is *not* a transition. An agent learns which entries are real in
one of two ways:

* declare a ``valid`` keyword argument in ``update``: the trainer then passes a boolean
  array, ``True`` where the entry is a real transition. The array is reused between steps:
  copy it if you keep it.
* otherwise apply the rule yourself: an entry is a reset step exactly when the same
  sub-env had ``terminated or truncated`` at the previous ``update``. Under ``SAME_STEP``
  and ``DISABLED`` every entry is real.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeAlias, runtime_checkable

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorEnv

REQUIRED_METHODS: tuple[str, ...] = ("act", "update")
"""Methods every agent must have; missing ones are reported before a run starts."""

OPTIONAL_METHODS: tuple[str, ...] = (
    "reset",
    "set_num_env",
    "set_hp",
    "train",
    "eval",
    "log",
    "save",
    "load",
)
"""Methods called when present."""


@runtime_checkable
class Agent(Protocol):
    """An online agent driven by the trainer (only ``act`` and ``update`` are required)."""

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Return one action per sub-env for the batch of observations ``obs``."""

    def update(
        self,
        next_obs: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        call_back: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """Learn from the step that followed the last ``act``.

        Args:
            next_obs: observation each action led to (the final one when an episode ended).
            reward: reward per sub-env.
            terminated: True where the episode reached a terminal state (no bootstrap).
            truncated: True where the episode was cut by a time limit (bootstrap).
            call_back: ``call_back(dict)`` logs scalar metrics to the trainer's callback
                under the tag ``agents/run_{i}`` at the current env step.
        """


class FullAgent(Agent, Protocol):
    """An agent with every optional method of the protocol."""

    def reset(self, seed: int) -> None:
        """Re-initialise all state and seed the agent's own random generators."""

    def set_num_env(self, num_envs: int) -> None:
        """Tell the agent how many sub-envs its batches have."""

    def set_hp(self, hp: dict[str, Any]) -> None:
        """Change hyperparameters; unknown keys are a ValueError naming them."""

    def train(self) -> None:
        """Switch to learning mode (exploration on)."""

    def eval(self) -> None:
        """Switch to greedy acting; ``update`` is not called in this mode."""

    def log(self) -> list[dict[str, np.ndarray] | None] | None:
        """Return one entry per sub-env (dict of arrays, or None) for the last step."""

    def save(self, path: str | None = None) -> Any:
        """Without ``path`` return a state object; with one, write the file ``path`` or files ``path.<ext>``
        (the runner finds, keeps and removes a checkpoint's files by those names).

        A ``save`` may also take a ``buffers`` keyword (``save(path=None, *, buffers=None)``): the
        runner then passes ``buffers=False`` for the best-agent state and, with
        ``CheckpointOptions(buffers=True)``, ``buffers=True`` for the run's full checkpoint.
        """

    def load(self, path: Any) -> None:
        """Restore the agent from a state object ``save()`` returned (a resume, ``Run{i}_Best_agent.t``) or from
        the path given to ``save(path)`` (the periodic and last checkpoints): it must take both."""


EnvMaker: TypeAlias = Callable[[], gym.Env | VectorEnv]
"""A zero-argument factory of a run's env (a single ``Env`` is wrapped into a vector env of one)."""

EnvLike: TypeAlias = gym.Env | VectorEnv | str | EnvMaker
"""What the trainer takes as an env: an instance, a registered gymnasium id (``"Pendulum-v1"``) or a factory."""

AgentMaker: TypeAlias = Callable[[VectorEnv], Agent]
"""A factory ``agent_factory(env) -> agent``, called once per run with the run's vector env."""

AgentLike: TypeAlias = Agent | AgentMaker
"""What the trainer takes as an agent: an instance following :class:`Agent`, or a factory of one."""


def missing_methods(agent: object) -> list[str]:
    """Return the required protocol methods ``agent`` lacks (empty when it conforms)."""
    return [name for name in REQUIRED_METHODS if not callable(getattr(agent, name, None))]
