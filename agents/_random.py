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


def _batch_size(obs: Any, space: gym.Space) -> int | None:
    """The number of sub-envs of a batch of observations of ``space`` (None when it cannot be read)."""
    try:
        while isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
            if isinstance(space, gym.spaces.Dict):
                key = next(iter(space.spaces))
                obs, space = obs[key], space.spaces[key]
            else:
                obs, space = obs[0], space.spaces[0]
        if isinstance(space, (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
            return int(np.shape(obs)[0])
        return len(obs)  # spaces batched as a tuple of items (Text, Sequence, Graph)
    except (TypeError, IndexError, KeyError, StopIteration):
        return None


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
        self._other_sizes: dict[int, gym.Space] = {}  # batches of other sizes (an eval env of other num_envs)

    def _resize(self, num_envs: int) -> None:
        self._build()

    def act(self, obs: Any) -> Any:
        """Return one random action per sub-env of ``obs`` (random in :meth:`eval` mode too).

        A batch of another size than ``num_envs`` (an eval env with another number of sub-envs)
        gets actions from a batched space of its own, made when that size first comes: the
        actions of ``num_envs``-sized batches are the same as without it.
        """
        size = _batch_size(obs, self.observation_space)
        if size is None or size == self.num_envs:
            return self._space.sample()
        space = self._other_sizes.get(size)
        if space is None:
            space = self._other_sizes[size] = batch_space(self.action_space, size)
            space.seed(int(self.np_rng.integers(2**31 - 1)))
        return space.sample()

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
        return {
            "space_rngs": _rng_states(self._space),
            "other_sizes": {size: _rng_states(space) for size, space in self._other_sizes.items()},
        }

    def _load_state(self, state: dict[str, Any]) -> None:
        _set_rng_states(self._space, state["space_rngs"])
        self._other_sizes = {}
        for size, rngs in state.get("other_sizes", {}).items():  # none in checkpoints of earlier versions
            space = self._other_sizes[int(size)] = batch_space(self.action_space, int(size))
            _set_rng_states(space, rngs)


def _rng_states(space: gym.Space) -> list[Any]:
    """The generator state of ``space`` and of each sub-space, in :func:`_space_tree`'s order."""
    return [sub.np_random.bit_generator.state for sub in _space_tree(space)]


def _set_rng_states(space: gym.Space, states: list[Any]) -> None:
    for sub, rng_state in zip(_space_tree(space), states):
        sub.np_random.bit_generator.state = rng_state
