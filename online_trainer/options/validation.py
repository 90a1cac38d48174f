"""Checks of user input, run before the first env step and before the experiment dir is touched."""

from __future__ import annotations

import functools
import inspect
import numbers
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import numpy as np

from online_trainer.errors import ValueTypeError, value_error
from online_trainer.loop import seeding
from online_trainer.loop.budget import Budget

F = TypeVar("F", bound=Callable[..., Any])


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def positive_int(name: str, value: Any, hint: str = "") -> int:
    """Return ``value`` as an int; raise ValueError naming ``name`` unless it is a positive int (:class:`ValueTypeError`
    when it is no int at all)."""
    if not _is_int(value) or value < 1:
        error = ValueError if _is_int(value) else ValueTypeError
        raise error(f"{name} must be a positive int, but got {name}={value!r}.{(' ' + hint) if hint else ''}")
    return int(value)


def optional_positive_int(name: str, value: Any, hint: str = "") -> int | None:
    """Like :func:`positive_int`, with None allowed."""
    return None if value is None else positive_int(name, value, hint)


def finite_number(name: str, value: Any, hint: str = "", positive: bool = False) -> float:
    """Return ``value`` as a float; raise ValueError naming ``name`` unless it is a finite real number (and, with
    ``positive``, above 0). NaN, which every comparison answers False, would never trigger what it sets."""
    real = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    if not real or not np.isfinite(value) or (positive and not value > 0):
        what = "a positive finite number" if positive else "a finite number"
        raise (ValueError if real else ValueTypeError)(
            f"{name} must be {what}, but got {name}={value!r}.{(' ' + hint) if hint else ''}"
        )
    return float(value)


def boolean(name: str, value: Any) -> bool:
    """Return ``value`` as a bool; raise ValueError naming ``name`` unless it is True or False (a numpy bool too).

    A truthy string or number is more likely a mistake than a choice (``resume="yes"``, ``resume=1``).
    """
    if not isinstance(value, (bool, np.bool_)):
        raise ValueTypeError(
            f"{name} must be True or False, but got {name}={value!r}: pass {name}=True or {name}=False."
        )
    return bool(value)


def choice(choices: tuple[str, ...], hint: str = "", aliases: Mapping[str, str] | None = None) -> Any:
    """A check ``check(name, value)`` that accepts one of ``choices`` and names the nearest one otherwise
    (then ``hint``, what the choices mean). ``aliases``: other names of the choices (``{"tensorboard": "tb"}``), so
    that a value near one of them names its choice."""
    meaning = hint
    names = {**(aliases or {}), **{c: c for c in choices}}

    def check(name: str, value: Any) -> str:
        if value not in choices:
            import difflib

            close = difflib.get_close_matches(str(value).lower(), list(names), n=1, cutoff=0.6)
            hint, explained = (f" (did you mean {names[close[0]]!r}?)" if close else ""), meaning
            raise value_error(value, str)(
                f"{name} must be one of {', '.join(map(repr, choices))}, but got {name}={value!r}"
                f"{hint}.{(' ' + explained) if explained else ''}"
            )
        return value

    return check


def keywords(call: str, given: Iterable[str], accepted: Iterable[str]) -> None:
    """Raise TypeError, as Python would, for the first of ``given`` that ``call`` does not accept, with the nearest
    accepted one (``multi_run() got an unexpected keyword argument 'num_worker' (did you mean 'num_workers'?)``)."""
    accepted = list(accepted)
    for name in given:
        if name not in accepted:
            import difflib

            close = difflib.get_close_matches(name, accepted, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(
                f"{call}() got an unexpected keyword argument {name!r}{hint}; its keywords: {', '.join(accepted)}."
            )


def keywords_only(cls: type, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    """Refuse positional arguments to the keyword-only dataclass ``cls`` naming its fields (M22: Python's "takes 1
    positional argument but 2 were given" for ``EvaluationOptions(10)``), then unknown keywords (:func:`keywords`)."""
    import dataclasses

    fields = [spec.name for spec in dataclasses.fields(cls)]
    if args:
        raise TypeError(
            f"{cls.__name__} takes keyword arguments only, but got {len(args)} positional: {', '.join(map(repr, args))}. "
            f"Name each by its field ({cls.__name__}(name=value, ...)); its fields: {', '.join(fields)}."
        )
    keywords(cls.__name__, kwargs, fields)


def suggests_keywords(function: F) -> F:
    """``function``, refusing an unknown keyword argument as Python does but naming the nearest one it takes (see
    :func:`keywords`); ``OnlineTrainer(exp_dri=...)`` said only "unexpected keyword argument"."""
    parameters = inspect.signature(function).parameters.values()
    named = [p.name for p in parameters if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    call_name = function.__qualname__.removesuffix(".__init__")

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        keywords(call_name, kwargs, named)
        return function(*args, **kwargs)

    return call  # type: ignore[return-value]


def episode_trigger(name: str, value: Any) -> Any:
    """None, a positive int ``k`` (every ``k``-th episode) or a callable ``episode_index -> bool``.

    A callable is checked to accept one positional argument (when Python can tell), not called.
    """
    if value is None or (_is_int(value) and value >= 1):
        return None if value is None else int(value)
    if not callable(value):
        raise (ValueError if _is_int(value) else ValueTypeError)(
            f"{name} must be a positive int k (every k-th episode: k, 2k, ...) or a callable "
            f"episode_index -> bool, but got {name}={value!r}: pass e.g. {name}=10 or "
            f"{name}=lambda i: i in (1, 100)."
        )
    try:
        inspect.signature(value).bind(1)
    except TypeError as exc:
        raise ValueError(
            f"{name}={value!r} must accept one argument, the episode index (from 1), but "
            f"calling it with one would fail: {exc}."
        ) from exc
    except ValueError:  # no signature to inspect (some builtins): it is called as it is
        pass
    return value


def budget(num_episodes: Any, total_steps: Any) -> Budget:
    """The run budget; exactly one of ``num_episodes`` and ``total_steps``, a positive int."""
    given = [value is not None for value in (num_episodes, total_steps)]
    if given.count(True) != 1 or not all(_is_int(v) and v > 0 for v in (num_episodes, total_steps) if v is not None):
        typed = all(_is_int(v) for v in (num_episodes, total_steps) if v is not None)
        raise (ValueError if typed else ValueTypeError)(
            "Give exactly one of num_episodes and total_steps, as a positive int, but got "
            f"num_episodes={num_episodes!r}, total_steps={total_steps!r}."
        )
    return Budget(
        num_episodes=None if num_episodes is None else int(num_episodes),
        total_steps=None if total_steps is None else int(total_steps),
    )


def seed_offset(value: Any, num_runs: int | None = None) -> int | None:
    """None or a non-negative int; with ``num_runs``, one whose runs' seeds stay below 2**31 (see
    :data:`online_trainer.loop.seeding.SEED_LIMIT`)."""
    if value is not None and (not _is_int(value) or value < 0):
        raise (ValueError if _is_int(value) else ValueTypeError)(
            f"seed_offset must be None or a non-negative int, but got seed_offset={value!r}."
        )
    if value is not None and num_runs is not None and value > seeding.highest_seed_offset(num_runs):
        last = seeding.run_seed(int(value), num_runs)
        raise ValueError(
            f"seed_offset={value!r} with num_runs={num_runs} gives run {num_runs} the seed {last}, and its sub-envs "
            f"the seeds up to {last + seeding.SEED_STRIDE - 1} (seed + j, j below {seeding.SEED_STRIDE}), but "
            f"training seeds must stay below 2**31 = {seeding.SEED_LIMIT}: evaluations add 2**31 to them, and "
            "np.random.seed takes no seed of 2**32 or more. Use a seed_offset of at most "
            f"{seeding.highest_seed_offset(num_runs)} (2**31 - 10000 * num_runs)."
        )
    return None if value is None else int(value)


def tuning_hp(value: Any) -> dict[str, Any] | None:
    """None or a dict of hyperparameters with string keys."""
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ValueTypeError(f"tuning_hp must be a dict of hyperparameter name to value, but got tuning_hp={value!r}.")
    return dict(value)


def needs_exp_dir(exp_dir: Any, **options: Any) -> None:
    """Raise ValueError when an option that writes files is set but ``exp_dir`` is None."""
    if exp_dir is not None:
        return
    for name, value in options.items():
        if value:
            raise ValueError(
                f"{name}={value!r} writes into the experiment directory, but exp_dir is None: pass "
                f"OnlineTrainer(..., exp_dir='runs/my_experiment') or drop {name}."
            )


def resume_or_overwrite(resume: Any, overwrite: Any) -> tuple[bool, bool]:
    """``resume`` and ``overwrite`` checked as flags, and not both True.

    Raises:
        ValueError: one is not a bool, or both are True.
    """
    resume, overwrite = boolean("resume", resume), boolean("overwrite", overwrite)
    if resume and overwrite:
        raise ValueError(
            "resume=True continues the experiment in exp_dir and overwrite=True replaces it: pass only "
            "one of them (resume=True to finish what was cut off, overwrite=True to start again)."
        )
    return resume, overwrite
