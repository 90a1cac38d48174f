"""An agent acting uniformly at random in any gymnasium action space."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

from online_trainer.agents._base import AgentBase


@dataclasses.dataclass(frozen=True, kw_only=True)
class RandomConfig:
    """The random agent has no hyperparameters."""


def _space_tree(space: gym.Space) -> Iterator[gym.Space]:
    """``space`` and every sub-space it holds, depth first, in a fixed order."""
    yield space
    children: Any = getattr(space, "spaces", None)
    if isinstance(children, dict):
        children = children.values()
    if children is not None:
        for child in children:
            yield from _space_tree(child)


class RandomAgent(AgentBase):
    """Samples one action per sub-env from the batched action space.

    Works with every gymnasium space (``Discrete``, ``Box``, ``MultiDiscrete``,
    ``MultiBinary``, ``Tuple``, ``Dict``, ...): actions come from
    ``batch_space(env.single_action_space, num_envs).sample()``, so they have the layout
    the vector env expects. The batched space is a private copy seeded from the agent's
    generator; the env's own spaces are never re-seeded. ``update`` learns nothing.

    Args:
        env: gymnasium ``VectorEnv`` (or ``Env``).
        seed: seed used until :meth:`reset` is called.
    """

    Config = RandomConfig

    def _build(self) -> None:
        self._space = batch_space(self.action_space, self.num_envs)
        self._space.seed(int(self.np_rng.integers(2**31 - 1)))

    def _resize(self, num_envs: int) -> None:
        self._build()

    def act(self, obs: Any) -> Any:
        """Return ``num_envs`` random actions (random in :meth:`eval` mode too)."""
        return self._space.sample()

    def update(
        self,
        next_obs: Any,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        call_back: Callable[[dict[str, Any]], None] | None = None,
        valid: np.ndarray | None = None,
    ) -> None:
        """Count real transitions; nothing is learned."""
        if self.training:
            self.steps += self.num_envs if valid is None else int(np.count_nonzero(valid))

    def _state(self) -> dict[str, Any]:
        return {"space_rngs": [space.np_random.bit_generator.state for space in _space_tree(self._space)]}

    def _load_state(self, state: dict[str, Any]) -> None:
        for space, rng_state in zip(_space_tree(self._space), state["space_rngs"]):
            space.np_random.bit_generator.state = rng_state
