"""Turn what users pass as ``env`` and ``agent`` into factories, and check what they build."""

from __future__ import annotations

import contextlib
import copy as _copy
import inspect
import logging
import weakref
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.vector.utils import iterate

from online_trainer.loop.protocol import missing_methods

logger = logging.getLogger(__name__)


class _InstanceOrFactory:
    """What the user passed for an env or an agent: an instance (used in place) or a factory."""

    _instance: Any
    _factory: Any

    @property
    def source(self) -> Any:
        """What the user passed."""
        return self._instance if self._instance is not None else self._factory

    @property
    def is_instance(self) -> bool:
        """Whether the user passed an instance rather than a factory."""
        return self._instance is not None


class EnvFactory(_InstanceOrFactory):
    """A zero-argument callable returning the :class:`VectorEnv` of a run.

    Accepts a ``VectorEnv``, a single ``gymnasium.Env`` (wrapped into a ``SyncVectorEnv``
    of one), a zero-argument factory of either, or a registered gymnasium id such as
    ``"Pendulum-v1"`` (``online_trainer.envs.make_env(id)``: one sub-env, built afresh for
    each run; ``"module:Env-v0"`` imports ``module`` first). A factory is called once per run. An
    env *instance* is used in place, by every run of this process in turn (each run resets
    it with its own seed) and left open for the user; sent to worker processes it travels
    as a copy, which an env holding processes or sockets (``AsyncVectorEnv``) cannot do:
    pass a factory such as ``online_trainer.envs.make_env(...)`` instead.

    Args:
        env: the env, as above.
        name: the argument that gave it, for messages (``"evaluation.env"`` for an eval env).
    """

    def __init__(self, env: Any, name: str = "env") -> None:
        self.name = name
        if isinstance(env, str):
            env = _registered_env(env, name)
        if isinstance(env, (gym.Env, VectorEnv)):
            self._instance, self._factory = env, None
        elif callable(env):
            _check_takes_nothing(env, name)
            self._instance, self._factory = None, env
        else:
            raise TypeError(
                f"{name} must be a gymnasium Env, a VectorEnv, a zero-argument factory of one or a registered env "
                f"id, but got {name}={env!r} of type {type(env).__name__}."
            )
        self._wrapped: VectorEnv | None = None

    def __call__(self) -> VectorEnv:
        if self._factory is not None:
            return as_vector_env(self._factory(), source=self._factory, name=self.name)
        if self._wrapped is None:
            self._wrapped = as_vector_env(self._instance, source=self._instance, name=self.name)
        return self._wrapped

    def fresh(self) -> VectorEnv:
        """An env of its own (for evaluation): the factory's, or a deep copy of the instance.

        Raises:
            TypeError: the instance cannot be copied (pass a factory instead).
        """
        if self._factory is not None:
            return self()
        try:
            if isinstance(self._instance, AsyncVectorEnv):  # a failed copy would close its pipes
                raise TypeError("an AsyncVectorEnv holds worker processes")
            return as_vector_env(_copy.deepcopy(self._instance), source=self._instance, name=self.name)
        except Exception as exc:
            raise TypeError(
                f"The env {self._instance!r} cannot be copied for evaluation ({type(exc).__name__}: "
                f"{exc}): pass EvaluationOptions(env=<a factory>), e.g. env=lambda: gym.make_vec(...)."
            ) from exc

    def release(self, env: VectorEnv) -> None:
        """Close an env a factory built; the user's instance stays open."""
        if self._factory is not None:
            env.close()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_wrapped": None}


def _registered_env(env_id: str, name: str = "env") -> Callable[[], VectorEnv]:
    """The factory of a registered gymnasium id, checked now so that a typo fails before any run."""
    from online_trainer.envs import make_env  # the one place that resolves ids, "module:Env-v0" included

    try:
        return make_env(env_id)
    except ValueError as exc:
        raise ValueError(
            f"{name}={env_id!r} is not a registered gymnasium env id ({exc}): pass a registered id such as "
            "'CartPole-v1' ('module:Env-v0' for ids another package registers, e.g. "
            "'minigrid:MiniGrid-Empty-5x5-v0'), an Env, a VectorEnv or a factory of one."
        ) from exc


def as_vector_env(env: Any, source: Any = None, name: str = "env") -> VectorEnv:
    """Return ``env`` as a VectorEnv, wrapping a single Env; raise TypeError for anything else (naming the
    argument ``name`` whose factory ``source`` returned it)."""
    if isinstance(env, VectorEnv):
        return env
    if isinstance(env, gym.Env):
        return SyncVectorEnv([lambda: env])
    raise TypeError(
        f"The {name} factory {_describe(source)} returned {env!r} of type {type(env).__name__}, which is "
        "neither a gymnasium Env nor a VectorEnv: make it return gym.make(...) or gym.make_vec(...)."
    )


def autoreset_mode(env: VectorEnv) -> AutoresetMode:
    """The autoreset mode of ``env`` (gymnasium's default, NEXT_STEP, when it does not say)."""
    mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    return mode if isinstance(mode, AutoresetMode) else AutoresetMode(mode)


_BUILT: list[weakref.ref[Any]] = []
"""The agents agent factories returned for training runs of this process, as weak references (those still alive)."""


class AgentFactory(_InstanceOrFactory):
    """A callable ``factory(env) -> agent`` giving the agent of a run.

    Accepts an agent instance or a factory ``agent_factory(env) -> agent`` (called once per
    run). An instance is used in place, unless the caller asks for a copy (several runs in
    one process each start from the instance as it was given).
    """

    def __init__(self, agent: Any) -> None:
        if not isinstance(agent, type) and callable(getattr(agent, "act", None)):
            self._instance, self._factory = agent, None
        elif callable(agent):
            _check_takes_env(agent)
            self._instance, self._factory = None, agent
        else:
            missing = ", ".join(missing_methods(agent))
            raise TypeError(
                f"agent must be an agent (with act and update) or a factory agent_factory(env) -> agent, but "
                f"got agent={agent_name(agent)}, which lacks: {missing}."
            )

    def check_fresh(self, agent: Any) -> None:
        """Refuse an agent that a factory returned for an earlier training run of this process and that is still
        alive: a run of this call, of an earlier call (a notebook's cell run again), or one a worker process ran
        before (a factory's module-level agent is one object per process, which every run there would share).

        Raises:
            TypeError: naming the factory and saying to build the agent inside it.
        """
        if self._factory is None:
            return
        _BUILT[:] = [ref for ref in _BUILT if ref() is not None]
        if any(ref() is agent for ref in _BUILT):
            raise TypeError(
                f"The agent factory {self._factory!r} returned an agent object an earlier run was given "
                f"({agent_name(agent)}): this run would start from what that run learned, and no seed would be "
                "independent. Build the agent inside the factory, agent=lambda env: MyAgent(env), or pass the agent "
                "itself (each run then takes a copy of it)."
            )
        with contextlib.suppress(TypeError):  # not weak-referenceable: not checked
            _BUILT.append(weakref.ref(agent))

    def __call__(self, env: VectorEnv, copy: bool = False) -> Any:
        """The run's agent: ``factory(env)``, the instance, or (``copy=True``) a deep copy of it.

        Raises:
            TypeError: the instance cannot be deep-copied.
        """
        if self._factory is not None:
            return self._factory(env)
        if not copy:
            return self._instance
        try:
            return _copy.deepcopy(self._instance)
        except Exception as exc:
            raise TypeError(
                f"The agent {self._instance!r} cannot be copied for each run ({type(exc).__name__}: {exc}): pass a "
                "factory, agent=lambda env: MyAgent(env), so that each run builds its own."
            ) from exc


def _check_takes_nothing(factory: Callable[..., Any], name: str) -> None:
    """Raise TypeError when the env factory ``name`` cannot be called without arguments.

    Checked on the signature, without calling it (a factory Python cannot inspect is called as it is).
    """
    try:
        inspect.signature(factory).bind()
    except TypeError as exc:
        raise TypeError(
            f"The env factory {name}={_describe(factory)} cannot be called without arguments ({exc}), but it is "
            f"called with none, once per run: {name}=lambda: gym.make_vec('CartPole-v1', num_envs=4) (give the "
            "factory's settings their values inside the lambda, or with functools.partial)."
        ) from None
    except ValueError:  # no signature to inspect (some builtins and extension types)
        pass


def _check_takes_env(factory: Callable[..., Any]) -> None:
    """Raise TypeError when the agent factory cannot be called with one argument, the run's env.

    Checked on the signature, without calling it (a factory Python cannot inspect is called as it is).
    """
    try:
        inspect.signature(factory).bind(None)
    except TypeError as exc:
        raise TypeError(
            f"The agent factory agent={_describe(factory)} cannot be called with one argument ({exc}), but it is "
            "called with the run's env, once per run: agent_factory(env) -> agent. Write it as "
            "lambda env: MyAgent(env) (or lambda env: MyAgent() when the agent does not need the env)."
        ) from None
    except ValueError:  # no signature to inspect (some builtins and extension types)
        pass


def check_agent(agent: Any, source: Any = None, train: bool = True) -> None:
    """Raise TypeError when ``agent`` lacks a required protocol method, or cannot be called as the loop calls it.

    The signatures are checked without calling anything (a method Python cannot inspect is taken as
    it is): ``act(obs)`` and, when training, ``update(next_obs, reward, terminated, truncated,
    call_back=...)``, so that a wrong signature is refused before the run's first env step.
    """
    made_by = "" if source is None or source is agent else f" (made by {_describe(source)})"
    missing = missing_methods(agent)
    if missing:
        raise TypeError(
            f"The agent {agent_name(agent)}{made_by} lacks the required method(s) {', '.join(missing)}: an agent must "
            "define act(obs) and update(next_obs, reward, terminated, truncated, call_back=None)."
        )
    calls: list[tuple[str, tuple[None, ...], dict[str, None], str]] = [("act", (None,), {}, "act(self, obs)")]
    if train:
        calls.append(
            (
                "update",
                (None,) * 4,
                {"call_back": None},
                "update(self, next_obs, reward, terminated, truncated, call_back=None)",
            )
        )
    for name, args, kwargs, expected in calls:
        method = getattr(agent, name)
        try:
            inspect.signature(method).bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(
                f"The agent {type(agent).__name__}{made_by} has {name}{inspect.signature(method)}, which the loop "
                f"cannot call ({exc}): define it as {expected}."
            ) from None
        except ValueError:  # no signature to inspect (some builtins and extension types)
            pass


def accepts_keyword(function: Callable[..., Any], name: str) -> bool:
    """True when ``function`` takes a ``name`` keyword (or ``**kwargs``)."""
    try:
        params = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def accepts_valid(update: Callable[..., Any]) -> bool:
    """True when ``update`` takes a ``valid`` keyword (or ``**kwargs``)."""
    return accepts_keyword(update, "valid")


def agent_name(agent: Any) -> str:
    """How messages name an agent: its own ``repr`` when its class defines one, else its class's name (not
    ``<__main__.NoSave object at 0x7fef...>``)."""
    if "__repr__" not in {name for cls in type(agent).__mro__[:-1] for name in vars(cls)}:  # object's own
        return type(agent).__name__
    return repr(agent)


def _describe(obj: Any) -> str:
    """A factory's name; one that says what made it (a config's ``agent.name``) gives its ``description``."""
    described = getattr(obj, "description", None)
    if isinstance(described, str):
        return described
    name = getattr(obj, "__qualname__", None) or type(obj).__name__
    return f"{name!s}" if obj is not None else "?"


def check_actions(actions: Any, env: VectorEnv, agent: Any) -> None:
    """Check the first actions of a run against the env's action space, before ``env.step``.

    Raises:
        ValueError: not one action per sub-env, actions of the wrong shape, integer actions outside their space, or
            NaN actions for a Box (Box actions outside its bounds are logged with a warning: envs may clip them).
        TypeError: None (a missing return), what numpy cannot read (a tensor on a GPU), float actions for an
            integer space (Discrete, MultiDiscrete, MultiBinary), or actions that are not real numbers for a Box.
    """
    space, num_envs = env.single_action_space, env.num_envs
    who = f"The agent {type(agent).__name__}'s act(obs)"
    if not isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        try:
            count = sum(1 for _ in iterate(env.action_space, actions))
        except Exception as exc:
            raise ValueError(
                f"{who} returned {actions!r}, which is not a batch of {num_envs} actions of "
                f"{space}: {type(exc).__name__}: {exc}"
            ) from exc
        if count != num_envs:
            raise ValueError(
                f"{who} returned {count} actions, but the env has num_envs={num_envs}: return one action per sub-env."
            )
        return
    if actions is None:  # a missing return: np.asarray(None) is a 0-d object array, "a scalar" (X14)
        raise TypeError(
            f"{who} returned None, but {space} with num_envs={num_envs} needs an array of shape "
            f"{(num_envs, *(space.shape or ()))}: does act end with return?"
        )
    try:
        batch = np.asarray(actions)
    except Exception as exc:  # a torch tensor on a GPU: torch's own "can't convert cuda:0 ..." named no agent (A16)
        device = getattr(actions, "device", None)
        on = f" on {device}" if device is not None else ""
        fix = (
            " (a tensor on the meta device holds no values: compute the actions on the CPU or a GPU, then "
            "actions.cpu().numpy())"
            if str(device) == "meta"
            else " (from a torch tensor: actions.cpu().numpy())"
        )
        raise TypeError(
            f"{who} returned a {type(actions).__name__}{on}, which numpy cannot read ({type(exc).__name__}: {exc}): "
            f"return a numpy array of actions{fix}."
        ) from exc
    expected = (num_envs, *(space.shape or ()))
    if batch.shape != expected:
        got = (
            f"{batch.shape[0]} action{'s' if batch.shape[0] != 1 else ''}"
            if batch.ndim
            else "a scalar, not a batch of actions"
        )
        raise ValueError(
            f"{who} returned actions of shape {batch.shape} ({got}), but {space} with "
            f"num_envs={num_envs} needs shape {expected}: return one action per sub-env."
        )
    if isinstance(space, spaces.Box):
        _check_box_actions(batch, space, who)
        return
    if not np.issubdtype(batch.dtype, np.integer):
        raise TypeError(
            f"{who} returned actions of dtype {batch.dtype} for the integer action space {space}: "
            f"return integers, e.g. np.asarray(actions, dtype=np.int64)."
        )
    if not env.action_space.contains(batch.astype(env.action_space.dtype, copy=False)):
        raise ValueError(f"{who} returned {batch.tolist()}, outside the action space {space}: {_in_range(space)}.")


def _in_range(space: spaces.Space[Any]) -> str:
    """How to return actions an integer action space holds (E17: the message said only that they were outside)."""
    if isinstance(space, spaces.Discrete):
        low = int(space.start)
        return f"return one integer per sub-env, from {low} to {low + int(space.n) - 1}"
    if isinstance(space, spaces.MultiDiscrete):
        lows = np.asarray(space.start)
        highs = lows + np.asarray(space.nvec) - 1
        return f"return one array per sub-env, each entry from its low {lows.tolist()} to its high {highs.tolist()}"
    if isinstance(space, spaces.MultiBinary):
        return "return one array of 0s and 1s per sub-env"
    return "return one action per sub-env that the space contains"


_WARNED_OF_BOUNDS: list[bool] = []


def _check_box_actions(batch: np.ndarray, space: spaces.Box, who: str) -> None:
    """Refuse NaN actions; warn of actions outside the bounds (an env may clip them: many policies rely on it)."""
    if not np.issubdtype(batch.dtype, np.number) or np.issubdtype(batch.dtype, np.complexfloating):
        raise TypeError(f"{who} returned actions of dtype {batch.dtype} for {space}: return real numbers.")
    if np.issubdtype(batch.dtype, np.floating) and np.isnan(batch).any():
        raise ValueError(
            f"{who} returned NaN actions ({batch.tolist()}) for {space}: the env would step on them, and the episodes' "
            "returns would be NaN. Check the policy's outputs (a NaN in its weights or observations)."
        )
    outside = (batch < space.low) | (batch > space.high)
    if outside.any() and not _WARNED_OF_BOUNDS:
        _WARNED_OF_BOUNDS.append(True)  # once a process: a policy that relies on the env's clipping does so each run
        logger.warning(
            "%s returned actions outside the bounds of %s (%s of %s, the first: %s): the env takes them as it does "
            "(gymnasium's classic-control and MuJoCo envs clip or use them), and the records keep them as acted. "
            "Clip them in act, np.clip(actions, space.low, space.high), if they should stay inside.",
            who,
            space,
            int(outside.sum()),
            outside.size,
            batch[outside][0].item(),
        )


def note_structured_observations(error: BaseException, env: VectorEnv) -> None:
    """Add a note to ``error``, raised by the agent's first ``act`` (or as it was built), when the env's observations
    are not arrays (``Dict``, ``Tuple``): an agent written for arrays fails on them with an error of its own that
    names neither (MiniGrid's dict observations gave "float() argument must be ... not 'dict'", tester X14)."""
    space = env.single_observation_space
    if not isinstance(space, (spaces.Dict, spaces.Tuple)) or not hasattr(error, "add_note"):  # notes: Python 3.11+
        return
    if isinstance(space, spaces.Dict):
        kind = "a dict of arrays, one per key"
        wrappers = (
            "gymnasium.wrappers.FlattenObservation (after FilterObservation to keep some keys), or "
            "minigrid.wrappers.ImgObsWrapper for MiniGrid"
        )
    else:
        kind, wrappers = "a tuple of values", "gymnasium.wrappers.FlattenObservation (one-hot for Discrete parts)"
    error.add_note(
        f"The env's observations are {kind}, not one array: its single_observation_space is {space}. An agent that "
        f"takes arrays needs the env wrapped, e.g. {wrappers} (make_env(..., wrappers=[...]))."
    )


def explain_step_error(error: Exception, actions: Any, env: VectorEnv, agent: Any, where: str) -> None:
    """Raise a clear error when ``env.step(actions)`` failed because of the agent's actions; else return.

    Envs check their actions with a bare ``assert`` (gymnasium's ``CartPole``: ``AssertionError: [2]
    (<class 'numpy.ndarray'>) invalid``), which names neither the agent nor the step. The first
    actions of a run are checked before its first step (:func:`check_actions`); this checks the ones
    that broke a later step the same way.

    Args:
        error: what ``env.step`` raised.
        actions: what the agent's ``act`` returned.
        env: the env.
        agent: the agent.
        where: the step, for the message (``"At env step 512"``).

    Raises:
        ValueError, TypeError: :func:`check_actions`'s message after ``where``, from ``error``.
    """
    try:
        check_actions(actions, env, agent)
    except (ValueError, TypeError) as problem:
        text = str(problem)
        text = text[:1].lower() + text[1:] if text.startswith("The ") else text  # one sentence after "where: "
        raise type(problem)(f"{where}: {text}") from error
    except Exception:  # the check itself could not read the actions: the env's own error says more
        return
    array_space = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
    if isinstance(env.single_action_space, array_space) and not isinstance(actions, np.ndarray):
        # right values in a list or tuple: a SyncVectorEnv takes them, a numpy-vectorised env (CartPole's) does not
        raise TypeError(
            f"{where}: the agent {type(agent).__name__}'s act(obs) returned a {type(actions).__name__}, and the env's "
            f"step failed on it ({type(error).__name__}: {error}): return a numpy array, e.g. np.asarray(actions)."
        ) from error
