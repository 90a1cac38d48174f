"""Turn what users pass as ``env`` and ``agent`` into factories, and check what they build."""

from __future__ import annotations

import copy
import inspect
import logging
from typing import Any, Callable

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv

from online_trainer.protocol import missing_methods

logger = logging.getLogger(__name__)


class EnvFactory:
    """A zero-argument callable returning a fresh :class:`VectorEnv` for every run.

    Accepts a ``VectorEnv``, a single ``gymnasium.Env`` (wrapped into a
    ``SyncVectorEnv`` of one), or a zero-argument factory of either. An env *instance* is
    deep-copied for every run where it can be, so runs never share state; a vector env
    that cannot be copied (``AsyncVectorEnv``) is reused and re-seeded, and cannot be sent
    to worker processes: pass a factory such as ``envs.make_env(...)`` instead.
    """

    def __init__(self, env: Any) -> None:
        if isinstance(env, (gym.Env, VectorEnv)):
            self._instance, self._factory = env, None
        elif callable(env):
            self._instance, self._factory = None, env
        else:
            raise TypeError(
                f"env must be a gymnasium Env, a VectorEnv or a zero-argument factory of one, but got "
                f"env={env!r} of type {type(env).__name__}."
            )

    @property
    def source(self) -> Any:
        """What the user passed."""
        return self._instance if self._instance is not None else self._factory

    def __call__(self) -> VectorEnv:
        if self._factory is not None:
            built = self._factory()
            return as_vector_env(built, source=self._factory)
        try:
            env = copy.deepcopy(self._instance)
        except Exception:  # an env holding processes, sockets or windows cannot be copied
            logger.debug("Could not deep-copy %r; reusing the instance", self._instance)
            env = self._instance
        return as_vector_env(env, source=self._instance)

    def release(self, env: VectorEnv) -> None:
        """Close an env this factory built, unless it is the user's instance being reused."""
        if env is not self._instance:
            env.close()


def as_vector_env(env: Any, source: Any = None) -> VectorEnv:
    """Return ``env`` as a VectorEnv, wrapping a single Env; raise TypeError for anything else."""
    if isinstance(env, VectorEnv):
        return env
    if isinstance(env, gym.Env):
        return SyncVectorEnv([lambda: env])
    raise TypeError(
        f"The env factory {_describe(source)} returned {env!r} of type {type(env).__name__}, which is "
        "neither a gymnasium Env nor a VectorEnv: make it return gym.make(...) or gym.make_vec(...)."
    )


def autoreset_mode(env: VectorEnv) -> AutoresetMode:
    """The autoreset mode of ``env`` (gymnasium's default, NEXT_STEP, when it does not say)."""
    mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    return mode if isinstance(mode, AutoresetMode) else AutoresetMode(mode)


class AgentFactory:
    """A callable ``factory(env) -> agent`` giving a fresh agent for every run.

    Accepts an agent instance (deep-copied for every run, so the object passed in is never
    trained) or a factory ``agent_factory(env) -> agent``.
    """

    def __init__(self, agent: Any) -> None:
        if not isinstance(agent, type) and callable(getattr(agent, "act", None)):
            self._instance, self._factory = agent, None
        elif callable(agent):
            self._instance, self._factory = None, agent
        else:
            missing = ", ".join(missing_methods(agent))
            raise TypeError(
                f"agent must be an agent (with act and update) or a factory agent_factory(env) -> agent, but "
                f"got agent={agent!r}, which lacks: {missing}."
            )

    @property
    def source(self) -> Any:
        """What the user passed."""
        return self._instance if self._instance is not None else self._factory

    def __call__(self, env: VectorEnv) -> Any:
        if self._instance is not None:
            return copy.deepcopy(self._instance)
        return self._factory(env)


def check_agent(agent: Any, source: Any = None) -> None:
    """Raise TypeError listing the required protocol methods ``agent`` lacks."""
    missing = missing_methods(agent)
    if missing:
        made_by = "" if source is None or source is agent else f" (made by {_describe(source)})"
        raise TypeError(
            f"The agent {agent!r}{made_by} lacks the required method(s) {', '.join(missing)}: an agent must "
            "define act(obs) and update(next_obs, reward, terminated, truncated, call_back=None)."
        )


def accepts_valid(update: Callable[..., Any]) -> bool:
    """True when ``update`` takes a ``valid`` keyword (or ``**kwargs``)."""
    try:
        params = inspect.signature(update).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "valid" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _describe(obj: Any) -> str:
    name = getattr(obj, "__qualname__", None) or type(obj).__name__
    return f"{name!s}" if obj is not None else "?"


def final_observations(next_obs: np.ndarray, info: dict[str, Any]) -> np.ndarray:
    """Under SAME_STEP, ``next_obs`` with the true final observations of finished sub-envs."""
    mask = info.get("_final_obs")
    if mask is None or not isinstance(next_obs, np.ndarray):
        return next_obs
    out = next_obs.copy()
    for i in np.flatnonzero(mask):
        out[i] = info["final_obs"][i]
    return out
