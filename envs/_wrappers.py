"""Wrapper entries of ``make_env(wrappers=...)`` and the env-id hints of its errors.

An entry is a wrapper class (or any callable ``env -> env``), an import path such as
``"minigrid.wrappers:ImgObsWrapper"``, a one-key mapping of either to its keyword arguments
(``{"gymnasium.wrappers:ClipReward": {"min_reward": -1, "max_reward": 1}}``), or a
``(class, kwargs)`` pair. Each is resolved and its keyword arguments are checked against the
wrapper's signature when ``make_env`` is called, so a typo fails before any env is built.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import gymnasium as gym

WrapperEntry: TypeAlias = type | Callable[..., Any] | str | Mapping[Any, Any] | tuple
"""One entry of ``make_env(wrappers=...)``: a class or callable, an import path, ``{path: kwargs}``, or ``(cls, kwargs)``."""

# Packages that register gymnasium ids when imported, by the namespace or prefix of their ids.
_ID_MODULES: tuple[tuple[str, str], ...] = (("ALE/", "ale_py"), ("MiniGrid-", "minigrid"), ("BabyAI-", "minigrid"))


class WrapperError(ValueError):
    """A wrapper of ``wrappers`` raised when it wrapped the env; :attr:`entry` names it (``wrappers[1]``)."""

    def __init__(self, entry: str, message: str) -> None:
        super().__init__(message)
        self.entry = entry

    def __reduce__(self) -> tuple[Any, ...]:  # the message alone would not rebuild it in a parent process
        return (type(self), (self.entry, str(self)))


class Wrapper:
    """A resolved wrapper entry: ``Wrapper(fn, kwargs, label)(env)`` is ``fn(env, **kwargs)``.

    It holds the class or callable and its keyword arguments only, so it pickles whenever they
    do (a class pickles as its import path).
    """

    name = "wrappers"
    """The entry's place in the list (``wrappers[1]``), which errors name."""

    def __init__(self, fn: Callable[..., Any], kwargs: dict[str, Any], label: str, name: str = "wrappers") -> None:
        self.fn, self.kwargs, self.label, self.name = fn, kwargs, label, name

    def __call__(self, env: gym.Env) -> gym.Env:
        try:
            return self.fn(env, **self.kwargs)
        except (TypeError, ValueError) as exc:  # a value the signature check could not judge ('ten' steps)
            raise WrapperError(self.name, f"{self.name}: {self!r} failed: {exc}") from exc
        except Exception as exc:  # a wrapper that does not fit the env (minigrid's ImgObsWrapper on Taxi, X14)
            raise WrapperError(
                self.name,
                f"{self.name}: {self!r} failed: {type(exc).__name__}: {exc}. It wrapped an env of observation space "
                f"{env.observation_space} and action space {env.action_space}: check that the wrapper is made for "
                "such an env, and its place in the list (each wraps the env the entries before it made).",
            ) from exc

    def __repr__(self) -> str:
        args = "".join(f", {key}={value!r}" for key, value in self.kwargs.items())
        return f"{self.label}(env{args})"


def resolve_wrappers(wrappers: Sequence[WrapperEntry]) -> tuple[Wrapper, ...]:
    """Resolve every entry of ``wrappers`` (see the module docstring), in order.

    Raises:
        ValueError: naming the entry (``wrappers[i]=...``) that cannot be imported, is not
            callable, is malformed, or whose keyword arguments the wrapper does not take.
    """
    if isinstance(wrappers, (str, Mapping)) or not isinstance(wrappers, Sequence):
        raise ValueError(
            f"wrappers must be a list of wrapper entries but got wrappers={wrappers!r}: write "
            "wrappers=[...] even for one wrapper."
        )
    return tuple(_resolve(f"wrappers[{i}]", entry) for i, entry in enumerate(wrappers))


def _resolve(name: str, entry: WrapperEntry) -> Wrapper:
    kwargs: Any = {}
    target: Any = entry
    if isinstance(entry, Mapping):
        if len(entry) != 1:
            raise ValueError(
                f"{name}={entry!r} must be a mapping with one key, the wrapper's import path, to its "
                "keyword arguments, e.g. {'gymnasium.wrappers:ClipReward': {'min_reward': -1}}."
            )
        ((target, kwargs),) = entry.items()
        kwargs = {} if kwargs is None else kwargs
    elif isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], Mapping):
        target, kwargs = entry
    if not isinstance(kwargs, Mapping) or not all(isinstance(key, str) for key in kwargs):
        raise ValueError(
            f"{name}={entry!r}: the keyword arguments of a wrapper must be a mapping with string keys, "
            f"but got {kwargs!r}."
        )
    label = target if isinstance(target, str) else getattr(target, "__qualname__", repr(target))
    fn = import_object(name, target) if isinstance(target, str) else target
    if not callable(fn):
        raise ValueError(
            f"{name}={entry!r} is not a wrapper: give a wrapper class, an import path such as "
            "'gymnasium.wrappers:ClipReward', or a one-key mapping of either to its keyword arguments."
        )
    kwargs = dict(kwargs)
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to inspect (some builtins): called as it is
        signature = None
    if signature is not None:
        try:
            signature.bind(None, **kwargs)
        except TypeError as exc:
            takes = [
                p
                for p in list(signature.parameters)[1:]
                if signature.parameters[p].kind
                in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
            ]
            raise ValueError(
                f"{name}: {label} cannot be called as {label}(env, **{kwargs!r}): {exc}; it takes "
                f"{', '.join(takes) or 'only env'}."
            ) from exc
    return Wrapper(fn, kwargs, label, name)


def import_object(name: str, path: str) -> Any:
    """The object at ``path`` (``"package.module:Name"``, or ``"package.module.Name"``).

    Raises:
        ValueError: naming ``name``, the path and what failed (the module or the attribute).
    """
    module_name, colon, attribute = path.partition(":")
    if not colon:
        module_name, _, attribute = path.rpartition(".")
    if not module_name or not attribute:
        raise ValueError(
            f"{name}={path!r} is not an import path: write 'package.module:Name', e.g. 'gymnasium.wrappers:ClipReward'."
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        # C17: a module of the lab's own folder, resumed from another folder, was said to need installing
        raise ValueError(
            f"{name}={path!r}: cannot import module {module_name!r} ({exc}); install the package that provides it, "
            f"fix the path, or run from the directory that holds it (the current one is {os.getcwd()}: "
            "'online-trainer run', 'resume' and 'eval' import the modules of the directory they run in)."
        ) from exc
    obj: Any = module
    for part in attribute.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"{name}={path!r}: {getattr(obj, '__name__', module_name)!r} has no attribute {part!r}{hint}."
            )
        obj = getattr(obj, part)
    return obj


def env_id_hint(env_id: str) -> str:
    """A hint for an unknown ``env_id`` whose ids come from a package: `` try 'ale_py:ALE/Pong-v5'.``, or ``""``."""
    if ":" in env_id:
        return ""
    for prefix, module in _ID_MODULES:
        if env_id.startswith(prefix):
            return (
                f" Ids of {module} are registered when it is imported: try {module + ':' + env_id!r} "
                f"(pip install {module.replace('_', '-')} if it is missing)."
            )
    if "/" in env_id:
        namespace = env_id.split("/", 1)[0]
        return (
            f" {namespace}/ ids are registered by the package that provides them when it is imported: write "
            f"'<module>:{env_id}' (e.g. 'ale_py:ALE/Pong-v5')."
        )
    return ""
