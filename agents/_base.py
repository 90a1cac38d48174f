"""What every reference agent shares: hyperparameters, seeding, modes and persistence.

A subclass declares a frozen dataclass ``Config`` of hyperparameters and implements
``_build`` (allocate all learning state from ``config``, ``num_envs`` and the agent's own
generators), ``_resize`` (a new number of sub-envs), ``_state``/``_load_state`` (the
learning state beyond config, seed and generators), ``act`` and ``update``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from online_trainer.agents._state import (
    numpy_rng_state,
    pack_state,
    read_state,
    set_numpy_rng_state,
    unpack_state,
    write_state,
)
from online_trainer.options.typed import build

logger = logging.getLogger(__name__)


def spaces_of(env: Any) -> tuple[gym.Space, gym.Space, int]:
    """Return ``(single_observation_space, single_action_space, num_envs)`` of an env.

    A gymnasium ``VectorEnv`` gives its single spaces; a plain ``Env`` counts as one sub-env.
    """
    if hasattr(env, "single_observation_space"):
        return env.single_observation_space, env.single_action_space, int(env.num_envs)
    if hasattr(env, "observation_space") and hasattr(env, "action_space"):
        return env.observation_space, env.action_space, 1
    raise TypeError(f"Expected a gymnasium VectorEnv or Env to read the spaces from, but got {env!r}.")


def make_config(config_cls: type, hyperparameters: dict[str, Any], owner: str) -> Any:
    """Build ``config_cls(**hyperparameters)`` with the package's one checker (:func:`online_trainer.options.typed.build`).

    Args:
        config_cls: the agent's ``Config`` dataclass.
        hyperparameters: field names to values; a list fills a tuple field, an int a float one.
        owner: the agent's class name, put before every message.

    Raises:
        ValueError: naming unknown keys (with the valid ones), values of the wrong type, or what
            ``config_cls.__post_init__`` rejects.
    """
    return build(config_cls, hyperparameters, owner=f"{owner} hyperparameters")


def require(condition: bool, name: str, value: Any, expected: str) -> None:
    """Raise ValueError ``"<name> must be <expected> but got <name>=<value>."`` unless ``condition``."""
    if not condition:
        raise ValueError(f"{name} must be {expected} but got {name}={value!r}.")


def as_valid(valid: np.ndarray | None, num_envs: int) -> np.ndarray:
    """A fresh boolean array of ``num_envs`` entries (all True when ``valid`` is None).

    Raises:
        ValueError: when ``valid`` does not have ``num_envs`` entries.
    """
    if valid is None:
        return np.ones(num_envs, dtype=bool)
    out = np.array(valid, dtype=bool, copy=True).reshape(-1)
    if out.shape[0] != num_envs:
        raise ValueError(f"valid must have num_envs={num_envs} entries but got shape {np.shape(valid)}.")
    return out


class AgentBase:
    """Base class of the reference agents (see the module docstring for the hooks).

    Args:
        env: a gymnasium ``VectorEnv`` (or ``Env``) giving the spaces and the number of
            sub-envs.
        seed: seed of the agent's generators until :meth:`reset` is called (None: fresh
            OS entropy).
        **hyperparameters: fields of the subclass's ``Config``.
    """

    Config: ClassVar[type]
    STRUCTURAL: ClassVar[frozenset[str]] = frozenset()
    """Hyperparameters whose change rebuilds the agent (re-initialised with its last seed)."""
    _pending: Any
    """What :meth:`act` left for ``update`` (each subclass sets its own kind; None: nothing pending)."""

    def __init__(self, env: Any, *, seed: int | None = None, **hyperparameters: Any) -> None:
        self.observation_space, self.action_space, self.num_envs = spaces_of(env)
        self._check_spaces()
        self.config = make_config(self.Config, hyperparameters, type(self).__name__)
        self.training = True
        self.steps = 0
        self.reset(seed)

    # ------------------------------------------------------------------ hooks
    def _check_spaces(self) -> None:
        """Raise ValueError when the spaces are not supported."""

    def _build(self) -> None:
        raise NotImplementedError

    def _resize(self, num_envs: int) -> None:
        """Adapt per-sub-env arrays to ``num_envs`` (``self.num_envs`` is already set)."""

    def _apply_config(self, changed: set[str]) -> None:
        """Take non-structural hyperparameter changes into account (e.g. an optimiser's lr)."""

    def _state(self) -> dict[str, Any]:
        return {}

    def _buffer_state(self, data: bool) -> dict[str, Any]:
        """The replay buffer's part of :meth:`_state` (its transitions only when ``data``); restored by
        :meth:`_load_state` with the rest."""
        return {}

    def _load_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`_state` returned (after :meth:`_build`)."""

    # --------------------------------------------------------------- protocol
    def reset(self, seed: int | None) -> None:
        """Re-initialise all learning state and seed the agent's own generators.

        The agent owns a numpy ``Generator`` (``np_rng``) and a CPU ``torch.Generator``
        (``torch_gen``), both derived from ``seed``; no global random state is touched.
        """
        self._seed = None if seed is None else int(seed)
        numpy_seq, torch_seq = np.random.SeedSequence(self._seed).spawn(2)
        self.np_rng = np.random.default_rng(numpy_seq)
        self.torch_gen = torch.Generator()
        self.torch_gen.manual_seed(int(torch_seq.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)))
        self.steps = 0
        self._build()

    def set_num_env(self, num_envs: int) -> None:
        """Tell the agent how many sub-envs its batches have.

        Raises:
            ValueError: when ``num_envs`` is not a positive integer.
        """
        require(isinstance(num_envs, (int, np.integer)) and num_envs > 0, "num_envs", num_envs, "a positive int")
        if int(num_envs) != self.num_envs:
            self.num_envs = int(num_envs)
            self._resize(self.num_envs)

    def set_hp(self, hp: dict[str, Any]) -> None:
        """Change hyperparameters.

        Changing one of ``STRUCTURAL`` (network sizes, buffer or rollout sizes)
        re-initialises the agent with its last seed; the others apply from the next step.

        Raises:
            ValueError: for unknown keys (the message lists the valid ones) or bad values.
        """
        if not isinstance(hp, dict):
            raise TypeError(f"set_hp expects a dict of hyperparameters but got {hp!r}.")
        old = self.config
        current = {field.name: getattr(old, field.name) for field in dataclasses.fields(old) if field.init}
        self.config = make_config(self.Config, {**current, **hp}, type(self).__name__)
        changed = {key for key in hp if getattr(self.config, key) != getattr(old, key)}
        if changed & self.STRUCTURAL:
            if self.steps:
                logger.warning(
                    "%s.set_hp(%s) re-initialises the agent after %d steps of learning.",
                    type(self).__name__,
                    sorted(changed & self.STRUCTURAL),
                    self.steps,
                )
            self.reset(self._seed)
        elif changed:
            self._apply_config(changed)

    def train(self) -> None:
        """Switch to learning mode (exploration on, ``update`` learns)."""
        self.training = True

    def eval(self) -> None:
        """Switch to greedy acting; ``update`` is then ignored."""
        self.training = False

    def _pending_step(self, valid: np.ndarray | None) -> tuple[Any, np.ndarray] | None:
        """What :meth:`act` left for ``update`` and the real-transition mask, or None in eval mode.

        Clears the pending step, so that the next ``update`` needs a new ``act``.

        Raises:
            RuntimeError: in training mode without a preceding :meth:`act`.
        """
        if not self.training:
            return None
        pending = getattr(self, "_pending", None)
        if pending is None:
            raise RuntimeError(f"{type(self).__name__}.update() was called without a preceding act().")
        self._pending = None
        return pending, as_valid(valid, self.num_envs)

    def log(self) -> list[dict[str, np.ndarray] | None] | None:
        """Per-sub-env values of the last step (None: nothing to log)."""
        return None

    def save(self, path: str | os.PathLike | None = None, *, buffers: bool | None = None) -> Any:
        """Return the full learning state, or write it to ``path + ".pt"``.

        The state (returned, or written with ``torch.save``) holds only tensors and
        primitive containers: it is a deep copy, and the file loads with
        ``torch.load(file, weights_only=True)``.

        Args:
            path: file-name prefix; None returns the state object instead.
            buffers: include the transitions of the agent's replay buffer (DQN, SAC; its position
                and size are always saved); None: as the config's ``save_buffer`` says (False for
                agents without one). The runner passes ``buffers=False`` for the best-agent state,
                and ``buffers=True`` for the run's full checkpoint with ``CheckpointOptions(buffers=True)``.

        Returns:
            The state object, or the name of the file written.
        """
        with_buffers = bool(getattr(self.config, "save_buffer", False)) if buffers is None else bool(buffers)
        state = pack_state(
            {
                "agent": type(self).__name__,
                "config": dataclasses.asdict(self.config),
                "seed": self._seed,
                "num_envs": self.num_envs,
                "steps": self.steps,
                "np_rng": numpy_rng_state(self.np_rng),
                "torch_rng": self.torch_gen.get_state(),
                **self._state(),
                **self._buffer_state(with_buffers),
            }
        )
        return state if path is None else write_state(path, state)

    def load(self, path: str | os.PathLike | dict[str, Any]) -> None:
        """Restore a state returned by :meth:`save` or written by ``save(path)``.

        The config and the number of sub-envs come from the state; the mode
        (:meth:`train`/:meth:`eval`) is kept.

        Raises:
            FileNotFoundError: when ``path`` names no saved state.
            ValueError: when the state belongs to another kind of agent.
        """
        packed = read_state(path) if isinstance(path, (str, os.PathLike)) else path
        state = unpack_state(packed)
        if state.get("agent") != type(self).__name__:
            raise ValueError(f"Cannot load a state of agent={state.get('agent')!r} into a {type(self).__name__}.")
        self.config = self.Config(**state["config"])
        self._seed = state["seed"]
        self.num_envs = int(state["num_envs"])
        self._build()
        self.steps = int(state["steps"])
        set_numpy_rng_state(self.np_rng, state["np_rng"])
        self.torch_gen.set_state(state["torch_rng"])
        self._load_state(state)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, {self.config})"
