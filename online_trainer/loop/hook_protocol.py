"""The hook protocol: what a hook is (:class:`Hook`, its methods), what it sees (:class:`RunContext`), and the
check of the user's hooks before any env step (:func:`check_hooks`).

The run's :class:`~online_trainer.run.hook_runner.HookRunner` calls the hooks; this module only says what
they are, so that the options (:class:`~online_trainer.options.groups.RunPlan`) can check them.
"""

from __future__ import annotations

import copy
import inspect
import json
import numbers
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

HOOK_METHODS = ("on_run_start", "on_step", "on_episodes", "on_episode_end", "on_eval", "on_checkpoint", "on_run_end")
_ARGUMENTS = {
    "on_run_start": ("ctx",),
    "on_step": ("ctx",),
    "on_episodes": ("ctx", "first_index", "returns", "lengths"),
    "on_episode_end": ("ctx", "record"),
    "on_eval": ("ctx", "result"),
    "on_checkpoint": ("ctx", "path"),
    "on_run_end": ("ctx",),
}
"""The positional arguments the runner passes to each hook method."""


class Hook:
    """A base for hooks: every method does nothing, so a subclass defines only what it needs.

    Attributes:
        every_steps: call :meth:`on_step` every this many env steps (real transitions of all
            sub-envs together).
        every_seconds: or every this many seconds of wall time (checked at env steps).
        handles: the hook methods the runner calls (a set of names such as ``"on_eval"``);
            None: every hook method the class defines. A hook whose configuration leaves an
            event of no use to it (the runner's checkpoints under an episode budget take no
            ``on_step``) says so here, once, when it is built.
        needs_eval_freq: the hook acts on the evaluations made during the run (``on_eval``): a
            run without ``evaluation.freq`` (no evaluation, or only the final one) is refused before it starts.
    """

    every_steps: int | None = None
    every_seconds: float | None = None
    handles: frozenset[str] | None = None
    needs_eval_freq: bool = False

    def on_run_start(self, ctx: RunContext) -> None:
        """The env is reset and the agent ready; no env step has been taken yet."""

    def on_step(self, ctx: RunContext) -> None:
        """``every_steps`` env steps or ``every_seconds`` seconds have passed since the last call; not called at the
        step that spends the run's budget, where :meth:`on_run_end` is."""

    def on_episodes(self, ctx: RunContext, first_index: int, returns: Sequence[float], lengths: Sequence[int]) -> None:
        """Episodes ``first_index, first_index + 1, ...`` ended at the same env step (``ctx.global_step``).

        The batched form of :meth:`on_episode_end`, for hooks that look at every episode:
        ``returns`` and ``lengths`` are lists of floats and of ints, one entry per episode
        (``np.asarray(returns)`` for array operations); ``ctx.episodes`` is the last index. Read
        them, do not keep them: copy what you keep (``list(returns)``).
        """

    def on_episode_end(self, ctx: RunContext, record: dict[str, Any]) -> None:
        """An episode ended: ``record`` has ``episode_index``, ``ep_return``, ``ep_length``, ``global_step``."""

    def on_eval(self, ctx: RunContext, result: dict[str, Any]) -> None:
        """An evaluation ended: ``result`` is its record (``mean``, ``std``, ``returns``, ``lengths``, ``global_step``,
        ``episodes_trained``, ``eval_index``, ``scheduled``, ``wall_time``)."""

    def on_checkpoint(self, ctx: RunContext, path: str) -> None:
        """A checkpoint of the agent was written to ``path``."""

    def on_run_end(self, ctx: RunContext) -> None:
        """The run ended (its budget spent, or stopped by a hook); final evaluation and checkpoints are done."""


class RunContext:
    """What a hook sees of its run.

    Attributes:
        run: the run's number, from 1.
        seed: the run's seed.
        global_step: env steps so far (real transitions of all sub-envs together).
        episodes: episodes finished so far.
        env: the run's (vector) env: change it through its own methods (``env.call``, ``env.set_attr``).
        agent: the run's agent.
        exp_dir: the run's experiment directory, or None.
        rng: a numpy generator seeded from the run's seed, for hooks that need randomness, so
            that runs stay reproducible.
        stop_reason: the reason given to :meth:`stop`, or None.
        resumed: True when the run continues from a full checkpoint (``resume=True``): hooks'
            ``state_dict()`` is restored before ``on_run_start``, and ``global_step`` is where it stopped.
    """

    def __init__(
        self, run: int, seed: int, env: Any, agent: Any, exp_dir: str | None, callback: Any, run_tag: str
    ) -> None:
        self.run, self.seed, self.env, self.agent, self.exp_dir = run, seed, env, agent, exp_dir
        self.global_step = 0
        self.episodes = 0
        self.rng = np.random.default_rng([seed, 0x686F6F6B])  # apart from the env's and the agent's streams
        self.stop_reason: str | None = None
        self.resumed = False
        self.preempt = False  # a preemption signal came: write a full checkpoint and stop (run.builtin.preemption)
        self.callback = callback
        """The run's logging callback (``callback(data, tag, step)``)."""
        self.run_tag = run_tag
        """``run_{i}`` (a sweep puts its configuration before it): the suffix of the run's callback tags."""
        self._runner: Any = None  # the run's HookRunner (online_trainer.run.hook_runner) dispatches what hooks announce

    def evaluated(self, result: dict[str, Any]) -> None:
        """Announce an evaluation of the agent (its record): every hook's ``on_eval`` is called, in order.

        ``result`` holds at least ``"mean"``, the evaluation's mean return, which the stoppers and the progress
        display read. An evaluation a hook announces is recorded nowhere (log it with :meth:`log`) and does not
        choose the run's best agent, which follows the runner's own evaluations.

        Raises:
            TypeError: ``result`` is no mapping with a real ``"mean"``.
        """
        mean = result.get("mean") if isinstance(result, Mapping) else None
        if isinstance(mean, bool) or not isinstance(mean, numbers.Real):
            raise TypeError(
                f"ctx.evaluated(result) takes a dict with 'mean', the evaluation's mean return (read by the stoppers "
                f"and the progress display), but got {type(result).__name__} "
                f"{sorted(result) if isinstance(result, Mapping) else result!r}: add result['mean']."
            )
        if self._runner is not None:
            self._runner.on_eval(result)

    def checkpointed(self, path: str) -> None:
        """Announce a checkpoint of the agent written to ``path``: every hook's ``on_checkpoint`` is called, in
        order, and the run writes its full checkpoint at the end of the step."""
        if self._runner is not None:
            self._runner.on_checkpoint(path)

    def stop(self, reason: str) -> None:
        """End the run after the current env step: status ``stopped_early`` with ``reason``; final
        evaluation and checkpoints are done as at a normal end."""
        if self.stop_reason is None:
            self.stop_reason = "a hook stopped it without a reason" if reason is None or reason == "" else str(reason)

    def log(self, data: dict[str, Any], step: int | None = None) -> None:
        """Log the scalars of ``data`` through the run's callback under ``hooks/run_{i}`` at ``step``
        (default: the global step)."""
        self.callback(data, f"hooks/{self.run_tag}", self.global_step if step is None else step, force=True)


def defines(hook: Any, name: str) -> bool:
    """Whether the runner calls ``hook``'s ``name``: the hook has its own (not :class:`Hook`'s no-op) and its
    :attr:`Hook.handles` does not leave it out."""
    method = getattr(hook, name, None)
    if not callable(method):
        return False
    handles = getattr(hook, "handles", None)
    if handles is not None and name not in handles:
        return False
    return getattr(type(hook), name, None) is not getattr(Hook, name)


def check_hooks(hooks: Sequence[Any] | None, eval_freq: int | None = None) -> tuple[Any, ...]:
    """The hooks as a tuple, each checked (before any env step).

    Args:
        hooks: the user's hooks.
        eval_freq: the runs' evaluation period, ``evaluation.freq`` (None: no evaluation during the run).

    Raises:
        TypeError: a hook has none of the hook methods, or is a class, or one of its methods does not take the
            arguments the runner passes, or it cannot be deep-copied (each run takes a copy), or it has one of
            ``state_dict`` and ``load_state_dict`` without the other.
        ValueError: a hook with ``on_step`` declares neither a positive ``every_steps`` nor ``every_seconds``;
            a hook that ``needs_eval_freq`` is given without ``evaluation.freq``.
    """
    if hooks is None:
        return ()
    if not isinstance(hooks, (list, tuple)):
        one = any(defines(hooks, name) for name in HOOK_METHODS)  # M22: a single hook was given no fix
        raise TypeError(
            f"hooks must be a list of hook objects, but got hooks={hooks!r}: "
            + (
                f"pass a list of one, hooks=[{type(hooks).__name__}(...)]."
                if one
                else "pass e.g. hooks=[StopOnReturn(475)]."
            )
        )
    for index, hook in enumerate(hooks):
        if isinstance(hook, type):
            raise TypeError(
                f"hooks holds the class {hook.__name__}: pass an instance, e.g. hooks=[{hook.__name__}(...)]."
            )
        if not any(defines(hook, name) for name in HOOK_METHODS):
            if isinstance(hook, Hook):  # it inherits them all, doing nothing (F17: "has none" read as a contradiction)
                raise TypeError(
                    f"hooks[{index}], a {type(hook).__name__}, overrides none of the hook methods "
                    f"{', '.join(HOOK_METHODS)}: it would never act "
                    f"(Hook's own methods do nothing; state_dict and load_state_dict only keep a hook's state). Define at "
                    f"least one in {type(hook).__name__}, or leave the hook out."
                )
            raise TypeError(
                f"hooks[{index}]={hook!r} has none of the hook methods {', '.join(HOOK_METHODS)}: define at least one "
                "(subclass online_trainer.hooks.Hook)."
            )
        for name in HOOK_METHODS:
            if defines(hook, name):
                _check_signature(hook, name)
        if defines(hook, "on_step"):
            steps, seconds = getattr(hook, "every_steps", None), getattr(hook, "every_seconds", None)
            # numpy's integers and floats too (H22: every_steps=np.int64(500) was refused as not "a positive int")
            valid_steps = (
                isinstance(steps, numbers.Integral) and not isinstance(steps, (bool, np.bool_)) and int(steps) > 0
            )
            valid_seconds = (
                isinstance(seconds, numbers.Real) and not isinstance(seconds, (bool, np.bool_)) and float(seconds) > 0
            )
            if not (valid_steps or valid_seconds) or (steps is not None and seconds is not None):
                raise ValueError(  # H22: named the hook by its repr alone, two of one class could not be told apart
                    f"hooks[{index}], a {type(hook).__name__}, has on_step, so it must declare one of every_steps (a "
                    f"positive int) or every_seconds (a positive number), but got every_steps={steps!r}, "
                    f"every_seconds={seconds!r}: set one of them in the hook (every_steps = 1000)."
                )
        if getattr(hook, "needs_eval_freq", False) is True and eval_freq is None:
            raise ValueError(
                f"hooks[{index}], a {type(hook).__name__}, acts on the evaluations made during the run, but "
                "evaluation.freq is None: no evaluation would come before the run's end, so it would never act. Pass "
                "evaluation=EvaluationOptions(freq=...) (evaluate every this many env steps or episodes), or drop "
                "the hook."
            )
        if callable(getattr(hook, "state_dict", None)) != callable(getattr(hook, "load_state_dict", None)):
            has, lacks = (
                ("state_dict", "load_state_dict(state)")
                if callable(getattr(hook, "state_dict", None))
                else ("load_state_dict", "state_dict()")
            )
            raise TypeError(
                f"hooks[{index}], a {type(hook).__name__}, has {has} but no {lacks}: a full checkpoint keeps a hook's "
                "state_dict() and a resumed run gives it back to load_state_dict(state). Define both, or neither for "
                "a hook without state."
            )
        _check_copyable(index, hook)
    return tuple(hooks)


def _check_copyable(index: int, hook: Any) -> None:
    """Raise TypeError unless ``hook`` can be deep-copied, as each run copies it (in this process too)."""
    try:
        copy.deepcopy(hook)
    except Exception as exc:
        raise TypeError(
            f"hooks[{index}]={hook!r} cannot be copied ({type(exc).__name__}: {exc}): each run gets its own deep "
            "copy of every hook, with any number of workers. Keep locks, open files, threads and processes out of "
            "the hook's __init__: create them in its on_run_start (and close them in on_run_end)."
        ) from exc


def _check_signature(hook: Any, name: str) -> None:
    """Raise unless ``hook.<name>`` takes the arguments the runner passes (a ``*args`` signature does)."""
    method = getattr(hook, name)
    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError):  # a builtin or a C callable: nothing to read
        return
    arguments = _ARGUMENTS[name]
    try:
        signature.bind(*arguments)
    except TypeError as error:
        raise TypeError(
            f"hook {type(hook).__name__}.{name}{signature} does not take what the runner passes ({error}): write "
            f"def {name}(self, {', '.join(arguments)})."
        ) from None


def hook_keys(hooks: Sequence[Any]) -> list[str]:
    """The names that key the user's hooks' state in a full checkpoint: ``Class#k`` for the ``k``-th hook of
    its class (from 0), e.g. ``["StopOnReturn#0", "MyHook#0", "MyHook#1"]``.

    Hooks of different classes may be listed in another order on resume; hooks of one class keep theirs.
    """
    seen: Counter[str] = Counter()
    keys = []
    for hook in hooks:
        name = type(hook).__qualname__
        keys.append(f"{name}#{seen[name]}")
        seen[name] += 1
    return keys


def hook_parameters(hook: Any) -> dict[str, Any]:
    """The arguments ``hook`` was made with, as far as it keeps them: each parameter of its class's ``__init__`` that
    it holds as an attribute of that name (or ``_name``), when the value is plain data (numbers, strings, lists and
    dicts of them). Attributes set otherwise (a start time, a file) are not parameters and are left out."""
    try:
        parameters = inspect.signature(type(hook).__init__).parameters.values()
    except (TypeError, ValueError):
        return {}
    attributes = getattr(hook, "__dict__", {})
    kept: dict[str, Any] = {}
    for parameter in parameters:
        if parameter.name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        for name in (parameter.name, "_" + parameter.name):
            if name in attributes:
                try:
                    kept[parameter.name] = json.loads(json.dumps(attributes[name], default=_numpy_as_plain))
                except (TypeError, ValueError):
                    pass  # not plain data: cannot be compared
                break
    return kept


def _numpy_as_plain(value: Any) -> Any:
    """A numpy number or array as the plain data it holds (a grid's ``np.arange(...)[k]`` is a hook's argument as
    often as an int); anything else is not plain data."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not plain data")


def stateful_hook_record(hooks: Sequence[Any]) -> dict[str, Any] | None:
    """What a resumed call must give again of the user's hooks with a ``state_dict`` (what a full checkpoint keeps):
    :func:`hook_keys` name -> ``{"class": ..., "params": hook_parameters(...)}``; None without such hooks."""
    record = {
        key: {"class": type(hook).__qualname__, "params": hook_parameters(hook)}
        for key, hook in zip(hook_keys(hooks), hooks)
        if callable(getattr(hook, "state_dict", None))
    }
    return record or None
