"""Several sinks at once: :class:`MultiCallback` hands every call to each of them."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from online_trainer.callbacks.base import CallBack, takes_wall_times
from online_trainer.callbacks.empty import EmptyCallBack
from online_trainer.callbacks.rewind import held_by, rewind_run

logger = logging.getLogger(__name__)


def check_callback(value: Any, name: str) -> None:
    """Raise TypeError unless ``value`` is a callback object: callable, with ``reset()`` and ``close()``, and with both
    or neither of ``checkpoint()`` and ``rewind()`` of its own.

    Args:
        value: the object to check.
        name: how the user passed it, for the message (``trainer.call_back[1]``).
    """
    if isinstance(value, type):
        raise TypeError(
            f"{name} must be a callback object, but got the class {value.__qualname__}: pass an instance, "
            f"{value.__qualname__}(...)."
        )
    missing = [attr for attr in ("__call__", "reset", "close") if not callable(getattr(value, attr, None))]
    if len(missing) == 3:  # no sink at all: a name, a path, a list of its own
        raise TypeError(
            f"{name} must be a callback object (callable, with reset() and close()), but got {value!r}: use e.g. "
            "online_trainer.callbacks.TBCallBack(log_dir=exp_dir), online_trainer.callbacks.CSVCallback(path) or "
            "online_trainer.callbacks.EmptyCallBack()."
        )
    if missing:
        lacks = " and ".join(
            f"{attr}()" if attr != "__call__" else "__call__(data, tag, step, force=False)" for attr in missing
        )
        raise TypeError(
            f"{name} must be a callback object (callable, with reset() and close()), but {value!r} lacks {lacks}: "
            "subclass online_trainer.callbacks.CallBack, which has them all (see docs/how-to/write-a-sink.md), or use "
            "a shipped sink, e.g. online_trainer.callbacks.TBCallBack(log_dir=exp_dir)."
        )
    own = {method: _defines(value, method) for method in ("checkpoint", "rewind")}
    if own["checkpoint"] != own["rewind"]:
        has, lacks = ("rewind", "checkpoint") if own["rewind"] else ("checkpoint", "rewind")
        harm = (
            "a resumed run would call rewind(run_tag, None), which removes everything the run logged"
            if has == "rewind"
            else "a resumed run's points after its checkpoint would never be cut back, and would be held twice"
        )
        raise TypeError(
            f"{name}: {type(value).__qualname__} defines {has}() but not {lacks}(): {harm}. Define {lacks}() too "
            "(checkpoint(run_tag) returns where the sink's outputs stand; rewind(run_tag, position) cuts them back "
            "to it: see docs/how-to/write-a-sink.md), or neither."
        )


def _defines(callback: Any, method: str) -> bool:
    """Whether ``callback`` has ``method`` of its own, not :class:`CallBack`'s, which does nothing."""
    found = getattr(type(callback), method, None)
    return callable(found) and found is not getattr(CallBack, method)


def sinks_not_cut_back(callback: Any) -> list[str]:
    """The class names of ``callback``'s sinks (itself, or each of a :class:`MultiCallback`'s) that a resume cannot cut
    back to a run's checkpoint: without ``checkpoint()`` and ``rewind()`` of their own. EmptyCallBack keeps nothing."""
    sinks = callback.callbacks if isinstance(callback, MultiCallback) else [callback]
    return [
        type(sink).__qualname__
        for sink in sinks
        if not isinstance(sink, EmptyCallBack) and not (_defines(sink, "checkpoint") and _defines(sink, "rewind"))
    ]


class MultiCallback(CallBack):
    """Hands every value, video and lifecycle call to each of ``callbacks``, in order.

    ``trainer.call_back = [cb1, cb2]`` makes one. Episode values reach each sink through its
    own :meth:`~online_trainer.callbacks.CallBack.series`, so each keeps its fast path (or sees
    them in its ``__call__``). :meth:`close` closes every sink even when one raises, then
    raises the first error.

    Args:
        callbacks: the sinks, each callable with ``reset()`` and ``close()``.

    Raises:
        TypeError: an element is not a callback object (named by its index).
    """

    def __init__(self, callbacks: Iterable[Any]) -> None:
        self.callbacks = list(callbacks)
        for index, callback in enumerate(self.callbacks):
            check_callback(callback, f"callbacks[{index}]")

    def __call__(self, data: Mapping[str, Any], tag: str, step: int, force: bool = False) -> None:
        for callback in self.callbacks:
            callback(data, tag, step, force)

    def series(
        self, key: str, tag: str, values: Sequence[Any], steps: Sequence[int], wall_times: Sequence[float] | None = None
    ) -> None:
        for callback in self.callbacks:
            series = getattr(callback, "series", None)
            if series is not None:
                if wall_times is not None and takes_wall_times(series):
                    series(key, tag, values, steps, wall_times=wall_times)
                else:
                    series(key, tag, values, steps)
            else:
                CallBack.series(callback, key, tag, values, steps)

    def video(self, tag: str, frames: Sequence[Any], fps: float, step: int) -> None:
        for callback in self.callbacks:
            video = getattr(callback, "video", None)
            if callable(video):
                video(tag, frames, fps, step)

    def setup(self, exp_dir: str | os.PathLike | None, runs: Mapping[int, int]) -> None:
        self._each("setup", exp_dir, runs)

    def start_run(
        self, run_idx: int, seed: int, params: Mapping[str, Any], exp_dir: str | None, run_tag: str = ""
    ) -> None:
        self._each("start_run", run_idx, seed, params, exp_dir, run_tag)

    def end_run(self, run_idx: int, status: str) -> None:
        self._each("end_run", run_idx, status)

    def checkpoint(self, run_tag: str) -> list[Any]:
        """Each sink's position, in order (see :meth:`online_trainer.callbacks.CallBack.checkpoint`)."""
        return [
            checkpoint(run_tag) if callable(checkpoint := getattr(callback, "checkpoint", None)) else None
            for callback in self.callbacks
        ]

    def check_position(self, position: Any) -> None:
        """Raise ``ValueError`` unless ``position`` holds a position for each sink, in order, that the sink takes."""
        positions = self._positions(position)
        for index, (callback, at) in enumerate(zip(self.callbacks, positions)):
            check = getattr(callback, "check_position", None)
            if callable(check):
                try:
                    check(at)
                except ValueError as exc:
                    raise ValueError(f"{_elsewhere(check, positions, index)}{callback!r}: {exc}") from None

    def rewind(self, run_tag: str, position: Any, since: float | None = None) -> None:
        for callback, at in zip(self.callbacks, self._positions(position)):
            rewind_run(callback, run_tag, at, since)

    def _positions(self, position: Any) -> list[Any]:
        """Each sink's part of ``position`` (what :meth:`checkpoint` returned; None: every run's entry goes)."""
        if position is None:
            return [None] * len(self.callbacks)
        if not isinstance(position, list) or len(position) != len(self.callbacks):
            held = held_by(position)
            sinks = ", ".join(type(callback).__name__ for callback in self.callbacks)
            raise ValueError(
                f"the run's checkpoint holds {held}, but this MultiCallback has {len(self.callbacks)} sink{'s' if len(self.callbacks) != 1 else ''} ({sinks}): "
                "resume with the callbacks the experiment ran with."
            )
        return position

    def reset(self) -> None:
        for callback in self.callbacks:
            callback.reset()

    def written_files(self) -> list[str]:
        """Every sink's (see :meth:`online_trainer.callbacks.CallBack.written_files`)."""
        return [path for callback in self.callbacks for path in getattr(callback, "written_files", list)()]

    def close(self) -> None:
        errors = []
        for callback in self.callbacks:
            try:
                callback.close()
            except Exception as exc:  # close the others, then report the first
                logger.error("could not close the callback %r: %s", callback, exc)
                errors.append(exc)
        if errors:
            raise errors[0]

    def _each(self, name: str, *args: Any) -> None:
        for callback in self.callbacks:
            method = getattr(callback, name, None)
            if callable(method):
                method(*args)

    def __repr__(self) -> str:
        return f"MultiCallback({self.callbacks!r})"


def _elsewhere(check: Any, positions: list[Any], index: int) -> str:
    """``the sinks are in another order ...; `` when the sink that refused position ``index`` takes another of
    ``positions``; else nothing."""
    for other, at in enumerate(positions):
        if other != index:
            try:
                check(at)
            except ValueError:
                continue
            return (
                f"the sinks are in another order than the experiment's (its sink {other + 1}'s position fits this "
                f"call's sink {index + 1}); "
            )
    return ""
