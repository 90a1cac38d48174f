"""Hooks: code that reacts to a run's events, and the context it sees.

A hook is any object with some of ``on_run_start(ctx)``, ``on_step(ctx)``,
``on_episodes(ctx, first_index, returns, lengths)``, ``on_episode_end(ctx, record)``,
``on_eval(ctx, result)``, ``on_checkpoint(ctx, path)`` and ``on_run_end(ctx)``. :class:`Hook`
is a convenient base whose methods do nothing; a method a hook lacks (or inherits unchanged
from :class:`Hook`, or leaves out of its :attr:`Hook.handles`) is never called and costs nothing.
``on_step`` runs every ``every_steps`` env steps or every ``every_seconds`` seconds, as the
hook declares; the loop pays for it only at those steps. What a hook takes and how often is
data the runner reads (``handles``, ``every_steps``, ``every_seconds``): no hook is rewired or
switched off by changing its methods.

A hook that evaluates the agent or writes a checkpoint says so through its context
(:meth:`RunContext.evaluated`, :meth:`RunContext.checkpointed`): the runner then calls every
hook's ``on_eval`` or ``on_checkpoint``, in order, before the announcing hook goes on.

The runner's own jobs are hooks of this interface, called before the user's, in this order:

1. the metrics stream (``metrics_run{i}.pkl``: its flush policy),
2. the callback's episode logs (``ep_return/run_{i}``, ``ep_length/run_{i}``),
3. evaluation (every ``eval_freq`` and at the end; its ``on_eval`` dispatch reaches every hook),
4. checkpoints and the best agent state (every ``checkpoint_freq``, ``Run{i}_Last``, ``Run{i}_Best_agent.t``),
5. progress (the run's bar),
6. :class:`~online_trainer.run.builtin.run_stats.RunStats` (SPS, rolling means, timing shares),
7. :class:`~online_trainer.run.builtin.preemption.PreemptionWatch` (a SIGTERM/SIGUSR1 check),

then the user's hooks in the order given. So a user's ``on_eval`` and ``on_checkpoint`` see
each evaluation and checkpoint once it is written, its ``on_episodes``/``on_episode_end`` see
episodes the callback has logged, and its ``on_run_end`` comes after the final evaluation
and the last and best checkpoints. At each batch of episodes, every hook's ``on_episodes`` runs
first (in the order above), then every ``on_episode_end``, episode by episode.

Each run gets its own deep copy of each user hook, so state kept on ``self`` is per run, here,
in worker processes and on Ray alike. :meth:`HookRunner.state_dict` collects the state of
every hook that has a ``state_dict()`` (and the step schedules), for exact resume, keyed by a
stable name (:func:`hook_keys`: the class name and its occurrence among the hooks of that
class), so hooks of different classes may be listed in another order when the run resumes.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import cloudpickle

from online_trainer.loop.budget import INFINITY
from online_trainer.loop.hook_protocol import RunContext, defines, hook_keys
from online_trainer.run.cadence import Cadence


class StopRun(Exception):
    """Raised by the run's event handlers once a hook has called :meth:`RunContext.stop`."""

    def __init__(self, global_step: int, reason: str) -> None:
        super().__init__(reason)
        self.global_step, self.reason = global_step, reason


def stateful_hooks(hooks: Sequence[Any]) -> dict[str, str]:
    """:func:`hook_keys` name -> class name of each of the user's ``hooks`` with a ``state_dict`` (what a full
    checkpoint keeps)."""
    return {
        key: type(hook).__qualname__
        for key, hook in zip(hook_keys(hooks), hooks)
        if callable(getattr(hook, "state_dict", None))
    }


def saved_hooks(state: Mapping[str, Any]) -> dict[str, str | None]:
    """What :func:`stateful_hooks` said of the hooks whose state :meth:`HookRunner.state_dict` returned (the class
    name None when the state does not record it)."""
    return {
        key: entry.get("type")
        for key, entry in state["hooks"].items()
        if entry.get("user") and entry["state"] is not None
    }


def check_saved_hooks(
    saved: Mapping[str, str | None], hooks: Mapping[str, str], where: str = "The saved state"
) -> None:
    """Raise unless the user hooks whose state was saved (:func:`saved_hooks`) are those of the run (:func:`stateful_hooks`).

    Raises:
        ValueError: a user hook with state is missing or extra, or of another class at its position.
    """
    if set(saved) != set(hooks):
        raise ValueError(
            f"{where} holds the user hooks {sorted(saved)}, but this run's hooks with state "
            f"are {sorted(hooks)}: resume with the hooks the run was started with (hooks of one class "
            "in the same order; classes in any order)."
        )
    for key, name in saved.items():
        if name is not None and name != hooks[key]:
            raise ValueError(
                f"{where} of {key} is a {name}'s, but this run's {key} is a {hooks[key]}: resume with "
                "the hooks in the order the run was started with."
            )


class HookRunner:
    """Calls the hooks of one run in their order: the run's built-ins, then a copy of each of the user's.

    It is what the loop's events reach (:class:`~online_trainer.run.events.RunEvents` hands
    them on): each method calls the hooks that define the matching hook method, in order.

    Args:
        hooks: the user's hooks (each is deep-copied: the run works on its own copy).
        ctx: the run's context; what its hooks announce through it (:meth:`RunContext.evaluated`,
            :meth:`RunContext.checkpointed`) is dispatched by this runner.
        builtin: the runner's own hooks by name (``"checkpoints"``, ...), called first in this
            order; their names key their state in :meth:`state_dict`.
    """

    def __init__(self, hooks: Sequence[Any], ctx: RunContext, builtin: Mapping[str, Any] | Sequence[Any] = ()) -> None:
        named = dict(builtin) if isinstance(builtin, Mapping) else {f"builtin[{i}]": h for i, h in enumerate(builtin)}
        user = {key: copy.deepcopy(hook) for key, hook in zip(hook_keys(hooks), hooks)}
        self.user_hooks = list(user.values())
        self.keys = [*named, *user]
        self.user_keys = frozenset(user)
        self.hooks = [*named.values(), *user.values()]  # built-ins first, then the user's
        self.ctx = ctx
        ctx._runner = self
        self.checkpoint_written = False
        """A hook announced a checkpoint since the run's last full checkpoint (the run clears it)."""
        self.run_start = self._methods("on_run_start")
        self.episodes = self._methods("on_episodes")
        self.episode_end = self._methods("on_episode_end")
        self.eval = self._methods("on_eval")
        self.checkpoint = self._methods("on_checkpoint")
        self.run_end = self._methods("on_run_end")
        # a hook's on_step runs at the cadence it declares (a built-in configured without one takes no on_step)
        self.cadences = {
            key: Cadence(h)
            for key, h in zip(self.keys, self.hooks)
            if defines(h, "on_step") and (getattr(h, "every_steps", None) or getattr(h, "every_seconds", None))
        }
        self.next_step = self._next_step()
        """The env step at which some ``on_step`` may be due (infinity when no hook has one)."""
        self.closed = False

    def raised_in(self, error: BaseException) -> str | None:
        """``"Key#0's on_step"`` when ``error`` came out of a user hook's method (its innermost frame of a user
        hook, by the traceback); None otherwise. Read only when a run failed: the calls cost nothing for it."""
        users = {id(hook): key for key, hook in zip(self.keys, self.hooks) if key in self.user_keys}
        found = None
        tb = error.__traceback__
        while tb is not None:
            key = users.get(id(tb.tb_frame.f_locals.get("self")))
            if key is not None:
                found = f"{key}'s {tb.tb_frame.f_code.co_name}"
            tb = tb.tb_next
        return found

    def _methods(self, name: str) -> list[Any]:
        return [getattr(h, name) for h in self.hooks if defines(h, name)]

    def _next_step(self) -> float:
        return min((c.next_step for c in self.cadences.values()), default=INFINITY)

    def start(self) -> None:
        for method in self.run_start:
            method(self.ctx)

    def on_steps(self, global_step: int) -> None:
        """Call each ``on_step`` due at ``global_step``; raise :class:`StopRun` when a hook asked to stop."""
        ctx = self.ctx
        ctx.global_step = global_step
        for cadence in self.cadences.values():
            if global_step >= cadence.next_step and cadence.due(global_step):
                cadence.hook.on_step(ctx)
        self.next_step = self._next_step()
        if ctx.stop_reason is not None:
            raise StopRun(global_step, ctx.stop_reason)

    def on_episodes(self, first_index: int, returns: Sequence[float], lengths: Sequence[int], global_step: int) -> None:
        """Episodes ``first_index, ...`` ended at ``global_step``: every ``on_episodes``, then every
        ``on_episode_end`` episode by episode; raise :class:`StopRun` when a hook asked to stop."""
        ctx = self.ctx
        ctx.global_step = global_step
        ctx.episodes = last = first_index + len(returns) - 1
        for method in self.episodes:
            method(ctx, first_index, returns, lengths)
        if self.episode_end:
            for j in range(len(returns)):
                ctx.episodes = index = first_index + j
                record = {
                    "episode_index": index,
                    "ep_return": float(returns[j]),
                    "ep_length": int(lengths[j]),
                    "global_step": global_step,
                }
                for method in self.episode_end:
                    method(ctx, record)
            ctx.episodes = last
        if ctx.stop_reason is not None:
            raise StopRun(global_step, ctx.stop_reason)

    def on_eval(self, result: dict[str, Any]) -> None:
        for method in self.eval:
            method(self.ctx, result)

    def on_checkpoint(self, path: str) -> None:
        self.checkpoint_written = True
        for method in self.checkpoint:
            method(self.ctx, path)

    def end(self) -> None:
        for method in self.run_end:
            method(self.ctx)

    def close(self) -> None:
        """Release what hooks hold (called however the run ended; once): every hook's ``close()``
        is called, and the first error raised is raised again after them all."""
        if self.closed:
            return
        self.closed = True
        error: BaseException | None = None
        for hook in self.hooks:
            close = getattr(hook, "close", None)
            if callable(close):
                try:
                    close()
                except BaseException as exc:  # the others still release what they hold
                    error = error or exc
        if error is not None:
            raise error

    def raise_if_stopped(self, global_step: int) -> None:
        """Raise :class:`StopRun` when a hook asked the run to stop."""
        if self.ctx.stop_reason is not None:
            raise StopRun(global_step, self.ctx.stop_reason)

    def check_states_pickle(self) -> None:
        """Raise TypeError naming the first user hook whose ``state_dict()`` does not pickle: said at the run's
        start, before its first env step, not at its first full checkpoint after the training up to it."""
        for key, hook in zip(self.keys, self.hooks):
            save = getattr(hook, "state_dict", None)
            if key in self.user_keys and callable(save):
                try:
                    cloudpickle.dumps(save())
                except Exception as exc:
                    raise TypeError(
                        f"what hook {key}'s state_dict() returned does not pickle ({type(exc).__name__}: {exc}), so "
                        "no full checkpoint of the run could be written: return plain data (numbers, strings, lists, "
                        "dicts, numpy arrays) from it."
                    ) from exc

    def state_dict(self) -> dict[str, Any]:
        """The state of the run's hooks, for exact resume.

        Returns:
            ``{"hooks": {key: {"state": ..., "next_step": ...}}, "rng": ...}``: for each hook
            with a ``state_dict()`` or an ``on_step`` schedule, keyed by the built-in's name
            (``"metrics"``, ``"evaluations"``, ``"checkpoints"``, ``"progress"``, ``"stats"``) or
            the user hook's :func:`hook_keys` name (``"StopOnReturn#0"``), its state (None without
            ``state_dict``) and the env step its ``on_step`` is next due (None without one);
            ``rng`` is the state of ``ctx.rng``, ``stop_reason`` a stop asked for.
        """
        hooks = {}
        for key, hook in zip(self.keys, self.hooks):
            save = getattr(hook, "state_dict", None)
            cadence = self.cadences.get(key)
            if callable(save) or cadence is not None:
                hooks[key] = {
                    "state": save() if callable(save) else None,
                    "user": key in self.user_keys,
                    "type": type(hook).__qualname__,
                    "next_step": None if cadence is None else cadence.next_step,
                }
        return {
            "hooks": hooks,
            "rng": copy.deepcopy(self.ctx.rng.bit_generator.state),
            "stop_reason": self.ctx.stop_reason,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` into this run's hooks (built the same way, not yet run).

        A built-in this run lacks (stats without a logging callback) ignores its saved state; a
        user hook without ``state_dict`` may come or go (an ``on_step`` schedule the run lacks is
        dropped, a new one starts afresh).

        Raises:
            ValueError: the state holds a user hook with state this run does not have (or lacks one
                it has), or a hook with state has no ``load_state_dict``.
        """
        saved = state["hooks"]
        check_saved_hooks(saved_hooks(state), stateful_hooks(self.user_hooks))
        for key, hook in zip(self.keys, self.hooks):
            entry = saved.get(key)
            if entry is None:
                continue
            if entry["state"] is not None:
                load = getattr(hook, "load_state_dict", None)
                if not callable(load):
                    raise ValueError(f"hook {hook!r} ({key}) has saved state but no load_state_dict(state) method.")
                load(entry["state"])
            cadence = self.cadences.get(key)
            if cadence is not None and entry["next_step"] is not None:
                cadence.next_step = entry["next_step"]
                cadence.restart(self.ctx.global_step)
        self.ctx.rng.bit_generator.state = copy.deepcopy(state["rng"])
        self.ctx.stop_reason = state.get("stop_reason")
        self.next_step = self._next_step()
