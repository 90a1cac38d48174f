"""``make_env``: a picklable zero-argument factory of gymnasium vector envs."""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv

from online_trainer.envs._wrappers import Wrapper, WrapperEntry, env_id_hint, resolve_wrappers

logger = logging.getLogger(__name__)

VECTORIZATIONS: tuple[str, ...] = ("sync", "async")
"""Accepted values of ``make_env(vectorization=...)``."""

_VECTOR_CLASSES: dict[str, type[VectorEnv]] = {"sync": SyncVectorEnv, "async": AsyncVectorEnv}


class VectorEnvFactory:
    """Builds a fresh ``VectorEnv`` on every call; made by :func:`make_env`.

    It holds only the arguments (no env), so it pickles to worker processes as long as the
    wrapper classes, their keyword arguments, ``vector_kwargs`` and env kwargs do.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        vectorization: str,
        render_mode: str | None,
        wrappers: tuple[Wrapper, ...],
        autoreset_mode: AutoresetMode | None,
        env_kwargs: dict[str, Any],
        vector_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.env_id = env_id
        self.num_envs = num_envs
        self.vectorization = vectorization
        self.render_mode = render_mode
        self.wrappers = wrappers
        self.autoreset_mode = autoreset_mode
        self.env_kwargs = env_kwargs
        self.vector_kwargs = dict(vector_kwargs or {})

    def __call__(self) -> VectorEnv:
        kwargs = dict(self.env_kwargs)
        if self.render_mode is not None:
            kwargs["render_mode"] = self.render_mode
        vector_kwargs = dict(self.vector_kwargs)
        if self.autoreset_mode is not None:
            vector_kwargs["autoreset_mode"] = self.autoreset_mode
        return gym.make_vec(
            self.env_id,
            num_envs=self.num_envs,
            vectorization_mode=self.vectorization,
            vector_kwargs=vector_kwargs,
            # gymnasium types wrappers as returning a gym.Wrapper; it only needs an Env
            wrappers=list(self.wrappers),  # type: ignore[arg-type]
            **kwargs,
        )

    def __repr__(self) -> str:
        extra = "".join(f", {key}={value!r}" for key, value in self.env_kwargs.items())
        mode = "" if self.autoreset_mode is None else f", autoreset_mode={self.autoreset_mode.name}"
        wrappers = f", wrappers={list(self.wrappers)!r}" if self.wrappers else ""
        vector = f", vector_kwargs={self.vector_kwargs!r}" if self.vector_kwargs else ""
        return (
            f"make_env({self.env_id!r}, num_envs={self.num_envs}, "
            f"vectorization={self.vectorization!r}{mode}{wrappers}{vector}{extra})"
        )


def make_env(
    env_id: str,
    num_envs: int = 1,
    vectorization: str = "sync",
    render_mode: str | None = None,
    wrappers: Sequence[WrapperEntry] = (),
    autoreset_mode: AutoresetMode | str | None = None,
    vector_kwargs: Mapping[str, Any] | None = None,
    **env_kwargs: Any,
) -> VectorEnvFactory:
    """Return a picklable zero-argument factory building ``num_envs`` copies of ``env_id``.

    Everything that can be checked without building the env is checked here (the id, the
    render mode against those the env's class declares, every wrapper's import path and
    keyword arguments, the vector env's keyword arguments), so a typo fails at once rather
    than in a worker.

    Example::

        make_env("minigrid:MiniGrid-Empty-5x5-v0", num_envs=8, vectorization="async",
                 wrappers=["minigrid.wrappers:ImgObsWrapper"], vector_kwargs={"shared_memory": False})

    Args:
        env_id: a registered gymnasium id; ``"module:Env-v0"`` imports ``module`` first, which
            registers the ids of packages such as ``minigrid`` (``"minigrid:MiniGrid-Empty-5x5-v0"``)
            and ``ale_py`` (``"ale_py:ALE/Pong-v5"``).
        num_envs: number of sub-envs.
        vectorization: ``"sync"`` (one process) or ``"async"`` (one process per sub-env).
        render_mode: passed to every sub-env (or as ``render_mode`` in ``env_kwargs``); one of the
            ``render_modes`` of the env class's metadata when it declares them, or one that
            ``gymnasium.make`` derives from them (``"human"`` from ``"rgb_array"``,
            ``"rgb_array_list"`` from ``"rgb_array"``).
        wrappers: single-env wrappers applied to each sub-env, in order (the first wraps the
            env itself). Each entry is a wrapper class or callable ``env -> env``, an import
            path ``"package.module:Name"``, a one-key mapping of either to the wrapper's keyword
            arguments (``{"gymnasium.wrappers:ClipReward": {"min_reward": -1, "max_reward": 1}}``),
            or a ``(class, kwargs)`` pair.
        autoreset_mode: a ``gymnasium.vector.AutoresetMode`` or its value
            (``"NextStep"``, ``"SameStep"``, ``"Disabled"``) or name (``"next_step"``...);
            None keeps gymnasium's default (NEXT_STEP).
        vector_kwargs: keyword arguments of the vector env class (``SyncVectorEnv`` or
            ``AsyncVectorEnv``), not of the env: e.g. ``{"shared_memory": False}`` for an async
            env whose observations shared memory cannot hold (MiniGrid's mission string).
        **env_kwargs: passed to the env constructor.

    Returns:
        A :class:`VectorEnvFactory`: call it to get a new ``VectorEnv``.

    Raises:
        ValueError: for an unknown env id, a bad ``vectorization``, ``num_envs``, ``render_mode``,
            ``autoreset_mode``, wrapper entry or ``vector_kwargs``.
    """
    _check_env_id(env_id)
    _check_render_mode(env_id, env_kwargs.get("render_mode", render_mode))
    if vectorization not in VECTORIZATIONS:
        raise ValueError(
            f"vectorization must be one of {', '.join(map(repr, VECTORIZATIONS))} "
            f"but got vectorization={vectorization!r}."
        )
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int but got num_envs={num_envs!r}.")
    return VectorEnvFactory(
        env_id,
        num_envs,
        vectorization,
        render_mode,
        resolve_wrappers(wrappers),
        _autoreset_mode(autoreset_mode),
        dict(env_kwargs),
        _vector_kwargs(vector_kwargs, vectorization),
    )


def _check_env_id(env_id: str) -> None:
    if not isinstance(env_id, str):
        raise ValueError(f"env_id must be a registered gymnasium id (a str) but got env_id={env_id!r}.")
    module, _, name = env_id.rpartition(":")
    try:
        if module:
            importlib.import_module(module)
        gym.spec(name)
    except (gym.error.Error, ImportError) as e:
        raise ValueError(f"Unknown env id env_id={env_id!r}: {e}{env_id_hint(env_id)}") from e


def _check_render_mode(env_id: str, render_mode: Any) -> None:
    """Refuse a render mode that ``gymnasium.make`` would only warn about and the env then lacks.

    The modes come from the metadata of the env's class (its entry point, imported, not built);
    an env whose entry point declares none, or cannot be imported here, is left to its run.
    """
    if render_mode is None:
        return
    spec = gym.spec(env_id.rpartition(":")[2])
    creator: object = spec.entry_point
    if isinstance(creator, str):
        try:
            creator = load_env_creator(creator)
        except (ImportError, AttributeError) as exc:
            logger.debug(
                "render_mode=%r of %s not checked: its entry point cannot be imported here (%s)",
                render_mode,
                env_id,
                exc,
            )
            return
    metadata = getattr(creator, "metadata", None)
    supported = list(metadata.get("render_modes") or []) if isinstance(metadata, Mapping) else []
    if not supported or render_mode in supported:
        return
    if render_mode == "human" and {"rgb_array", "rgb_array_list"} & set(supported):
        return  # gymnasium.make adds HumanRendering
    if isinstance(render_mode, str) and render_mode.endswith("_list") and render_mode[: -len("_list")] in supported:
        return  # gymnasium.make adds RenderCollection
    raise ValueError(
        f"render_mode={render_mode!r} is not a render mode of {env_id}, which supports {supported}: "
        "pass one of them, or None."
    )


def _vector_kwargs(vector_kwargs: Mapping[str, Any] | None, vectorization: str) -> dict[str, Any]:
    """``vector_kwargs`` as a dict, checked against the vector env class's signature."""
    if vector_kwargs is None:
        return {}
    if not isinstance(vector_kwargs, Mapping) or not all(isinstance(key, str) for key in vector_kwargs):
        raise ValueError(f"vector_kwargs must be a mapping with string keys but got vector_kwargs={vector_kwargs!r}.")
    cls = _VECTOR_CLASSES[vectorization]
    parameters = inspect.signature(cls).parameters
    takes = [name for name in parameters if name not in ("env_fns", "autoreset_mode")]
    for key in vector_kwargs:
        if key == "env_fns":
            raise ValueError("vector_kwargs cannot set env_fns: make_env builds the sub-envs from env_id.")
        if key == "autoreset_mode":
            raise ValueError(
                f"vector_kwargs={dict(vector_kwargs)!r}: pass autoreset_mode=... to make_env itself "
                f"(it checks the value), not in vector_kwargs."
            )
        if key not in parameters:
            hint = (
                " (it is an AsyncVectorEnv option: add vectorization='async')"
                if key in inspect.signature(AsyncVectorEnv).parameters
                else ""
            )
            raise ValueError(
                f"vector_kwargs={dict(vector_kwargs)!r}: {cls.__name__} (vectorization={vectorization!r}) "
                f"takes no argument {key!r}{hint}; it takes {', '.join(takes)}. Keyword arguments of "
                "the env itself go to make_env(..., **env_kwargs)."
            )
    return dict(vector_kwargs)


def _autoreset_mode(mode: AutoresetMode | str | None) -> AutoresetMode | None:
    if mode is None or isinstance(mode, AutoresetMode):
        return mode
    for member in AutoresetMode:
        if mode in (member.value, member.name, member.name.lower()):
            return member
    allowed = ", ".join(repr(m.name.lower()) for m in AutoresetMode)
    raise ValueError(
        f"autoreset_mode must be None, an AutoresetMode or one of {allowed} but got autoreset_mode={mode!r}."
    )
