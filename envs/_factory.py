"""``make_env``: a picklable zero-argument factory of gymnasium vector envs."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Sequence
from typing import Any, Callable

import gymnasium as gym
from gymnasium.vector import AutoresetMode, VectorEnv

VECTORIZATIONS: tuple[str, ...] = ("sync", "async")
"""Accepted values of ``make_env(vectorization=...)``."""

WrapperSpec = type | tuple[type, dict[str, Any]]
"""A single-env wrapper class, or a ``(class, kwargs)`` pair."""


class VectorEnvFactory:
    """Builds a fresh ``VectorEnv`` on every call; made by :func:`make_env`.

    It holds only the arguments (no env), so it pickles to worker processes as long as the
    wrapper classes and env kwargs do.
    """

    def __init__(self, env_id: str, num_envs: int, vectorization: str, render_mode: str | None,
                 wrappers: tuple[Callable[[gym.Env], gym.Env], ...], autoreset_mode: AutoresetMode | None,
                 env_kwargs: dict[str, Any]) -> None:
        self.env_id = env_id
        self.num_envs = num_envs
        self.vectorization = vectorization
        self.render_mode = render_mode
        self.wrappers = wrappers
        self.autoreset_mode = autoreset_mode
        self.env_kwargs = env_kwargs

    def __call__(self) -> VectorEnv:
        kwargs = dict(self.env_kwargs)
        if self.render_mode is not None:
            kwargs["render_mode"] = self.render_mode
        vector_kwargs = {} if self.autoreset_mode is None else {"autoreset_mode": self.autoreset_mode}
        return gym.make_vec(self.env_id, num_envs=self.num_envs, vectorization_mode=self.vectorization,
                            vector_kwargs=vector_kwargs, wrappers=list(self.wrappers), **kwargs)

    def __repr__(self) -> str:
        extra = "".join(f", {key}={value!r}" for key, value in self.env_kwargs.items())
        mode = "" if self.autoreset_mode is None else f", autoreset_mode={self.autoreset_mode.name}"
        return (f"make_env({self.env_id!r}, num_envs={self.num_envs}, "
                f"vectorization={self.vectorization!r}{mode}{extra})")


def make_env(
    env_id: str,
    num_envs: int = 1,
    vectorization: str = "sync",
    render_mode: str | None = None,
    wrappers: Sequence[WrapperSpec] = (),
    autoreset_mode: AutoresetMode | str | None = None,
    **env_kwargs: Any,
) -> VectorEnvFactory:
    """Return a picklable zero-argument factory building ``num_envs`` copies of ``env_id``.

    Everything that can be checked without building the env is checked here, so a typo
    fails at once rather than in a worker.

    Args:
        env_id: a registered gymnasium id (``"module:Env-v0"`` imports ``module`` first).
        num_envs: number of sub-envs.
        vectorization: ``"sync"`` (one process) or ``"async"`` (one process per sub-env).
        render_mode: passed to every sub-env.
        wrappers: single-env wrappers applied to each sub-env, in order: classes, or
            ``(class, kwargs)`` pairs.
        autoreset_mode: a ``gymnasium.vector.AutoresetMode`` or its value
            (``"NextStep"``, ``"SameStep"``, ``"Disabled"``) or name (``"next_step"``...);
            None keeps gymnasium's default (NEXT_STEP).
        **env_kwargs: passed to the env constructor.

    Returns:
        A :class:`VectorEnvFactory`: call it to get a new ``VectorEnv``.

    Raises:
        ValueError: for an unknown env id, a bad ``vectorization``, ``num_envs``,
            ``autoreset_mode`` or wrapper entry.
    """
    _check_env_id(env_id)
    if vectorization not in VECTORIZATIONS:
        raise ValueError(f"vectorization must be one of {', '.join(map(repr, VECTORIZATIONS))} "
                         f"but got vectorization={vectorization!r}.")
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int but got num_envs={num_envs!r}.")
    return VectorEnvFactory(env_id, num_envs, vectorization, render_mode, _wrapper_fns(wrappers),
                            _autoreset_mode(autoreset_mode), dict(env_kwargs))


def _check_env_id(env_id: str) -> None:
    if not isinstance(env_id, str):
        raise ValueError(f"env_id must be a registered gymnasium id (a str) but got env_id={env_id!r}.")
    module, _, name = env_id.rpartition(":")
    try:
        if module:
            importlib.import_module(module)
        gym.spec(name)
    except (gym.error.Error, ImportError) as e:
        raise ValueError(f"Unknown env id env_id={env_id!r}: {e}") from e


def _wrapper_fns(wrappers: Sequence[WrapperSpec]) -> tuple[Callable[[gym.Env], gym.Env], ...]:
    fns = []
    for entry in wrappers:
        if isinstance(entry, tuple) and len(entry) == 2 and callable(entry[0]) and isinstance(entry[1], dict):
            fns.append(functools.partial(entry[0], **entry[1]))
        elif callable(entry):
            fns.append(entry)
        else:
            raise ValueError(f"Each wrapper must be a wrapper class or a (class, kwargs) pair but got {entry!r}.")
    return tuple(fns)


def _autoreset_mode(mode: AutoresetMode | str | None) -> AutoresetMode | None:
    if mode is None or isinstance(mode, AutoresetMode):
        return mode
    for member in AutoresetMode:
        if mode in (member.value, member.name, member.name.lower()):
            return member
    allowed = ", ".join(repr(m.name.lower()) for m in AutoresetMode)
    raise ValueError(f"autoreset_mode must be None, an AutoresetMode or one of {allowed} "
                     f"but got autoreset_mode={mode!r}.")
