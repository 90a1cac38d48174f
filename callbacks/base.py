"""The interface every logging sink implements."""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np


class CallBack:
    """A logging sink: ``cb(data, tag, step, force=False)``, ``reset()``, ``close()``.

    Subclasses open their writer lazily on the first write, so a callback can be pickled
    (or cloudpickled to a worker process) until then; a pickled copy never carries an open
    file and opens its own on its first write.

    Every value reaches :meth:`__call__` unless the class itself takes a faster path: a
    subclass that overrides ``__call__`` but not :meth:`series` gets the base ``series``, which
    routes each value through its ``__call__``. So overriding ``__call__`` of any sink
    (``TBCallBack`` included) sees every episode return; this is decided once, when the
    subclass is defined.

    Sinks that keep one record per run (MLflow, W&B) use the optional lifecycle methods
    :meth:`setup`, :meth:`start_run` and :meth:`end_run`; they do nothing here.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A fast series() or step_logger() inherited from a sink would bypass the subclass's own __call__.
        if "__call__" in cls.__dict__:
            for name in ("series", "step_logger"):
                if name not in cls.__dict__ and getattr(cls, name) is not getattr(CallBack, name):
                    setattr(cls, name, getattr(CallBack, name))  # setattr: mypy refuses assigning a method

    def __call__(self, data: Mapping[str, Any], tag: str, step: int, force: bool = False) -> None:
        """Log the scalars of ``data`` as ``{key}/{tag}`` at ``step``.

        Args:
            data: metric name to a number (Python or numpy scalar).
            tag: the group the values belong to, for example ``run_0`` or ``agents/run_0``.
            step: the x value of the point (env step or episode index).
            force: write these values as they are, bypassing any averaging; a sink that
                buffers may still hold them until its next flush (``TBCallBack`` flushes
                on such a call once ``max_delay`` seconds have passed since the last).
        """

    def series(
        self, key: str, tag: str, values: Sequence[Any], steps: Sequence[int], wall_times: Sequence[float] | None = None
    ) -> None:
        """Log ``values[j]`` of the scalar ``key`` at ``steps[j]``, each as a forced point.

        The runner logs the returns and lengths of episodes this way, in batches of those that
        ended within about a second (``ep_return`` under ``ep_return/run_{i}``, with the episode
        indices as steps). This default makes one call per value; sinks that buffer take them all
        at once.

        Args:
            key: the scalar's name.
            tag: its group.
            values: the values, in order.
            steps: the x value of each.
            wall_times: when each value was measured, in seconds since the epoch (``time.time()``);
                None: now. A sink that stamps its points with a time uses these; this default,
                routing each value through ``__call__``, cannot pass them on.
        """
        if isinstance(values, np.ndarray):  # each value reaches __call__ as a Python number
            values = values.tolist()
        for value, step in zip(values, steps):
            self({key: value}, tag, step, force=True)

    def step_logger(self, tag: str) -> AgentLogger:
        """The ``call_back`` the runner hands to ``agent.update``: it logs the agent's dicts under ``tag``
        (``agents/run_{i}``) at the env step the runner sets (its ``step``) before each update.

        This one calls the sink with every dict; a sink may return one that keeps the values its own
        faster way (``TBCallBack`` does), as long as every value still reaches it.
        """
        return StepLogger(self, tag)

    def video(self, tag: str, frames: Sequence[Any], fps: float, step: int) -> None:
        """Log a video: ``frames`` (H x W x 3 uint8 arrays) to play at ``fps``, at ``step``.

        Optional: the runner calls it, when the callback has it, with each evaluation video
        (``record_video``) under ``eval/video/run_{i}`` at the env step. This one drops it;
        :class:`online_trainer.callbacks.TBCallBack` writes an animated GIF.
        """

    def setup(self, exp_dir: str | os.PathLike | None, runs: Mapping[int, int]) -> None:
        """Prepare what the runs of one experiment share; called in the parent, before any run starts.

        Called once per experiment directory (a sweep has one per configuration), before the
        callback is sent to worker processes, so what it creates there (a tracking store, an
        experiment, run ids) is created once and travels with the copies.

        Args:
            exp_dir: the experiment directory, or None when records stay in memory.
            runs: the runs about to execute: run number (from 1) -> seed.
        """

    def start_run(
        self, run_idx: int, seed: int, params: Mapping[str, Any], exp_dir: str | None, run_tag: str = ""
    ) -> None:
        """A run starts, in the process that executes it, before its first env step.

        Args:
            run_idx: the run's number, from 1.
            seed: the run's seed.
            params: the tuning hyperparameters given to the agent (empty when none).
            exp_dir: the experiment directory, or None.
            run_tag: the last part of every tag the run logs under (``run_1``; ``lr=0.1/run_1``
                in a sweep); :func:`metric_name` takes it off.
        """

    def end_run(self, run_idx: int, status: str) -> None:
        """A run ended (``finished``, ``failed`` or ``interrupted``), in its process, before :meth:`close`."""

    def reset(self) -> None:
        """Drop values averaged but not yet written (called when a run starts)."""

    def checkpoint(self, run_tag: str) -> Any:
        """Write what is buffered and return where this sink's outputs stand; called at a run's full
        checkpoint, in the run's process.

        What it returns is stored in the checkpoint file and handed back to :meth:`rewind` when the
        run is resumed from it, so it must be plain data: dicts, lists, tuples, strings, numbers,
        None (the built-in sinks return a position's ``to_state()``). An object of your own class
        would be pickled by reference, and a checkpoint would then load only where that class
        imports, unchanged. None (this default) when there is nothing to cut back.

        Args:
            run_tag: the last part of the run's tags (``run_1``; ``lr=0.1/run_1`` in a sweep).
        """
        return None

    def check_position(self, position: Any) -> None:
        """Raise ``ValueError`` unless :meth:`rewind` takes ``position`` (what a run's checkpoint holds for this sink).

        Called in the parent process for every run that continues from a checkpoint, before
        anything of the experiment changes, so that a resume with other callbacks than the
        experiment ran with is refused whole, not after some files were cut. This default takes
        any position.
        """

    def rewind(self, run_tag: str, position: Any, since: float | None = None) -> None:
        """Remove what the run ``run_tag`` logged after ``position`` (what :meth:`checkpoint` returned, as
        plain data), or everything it logged when ``position`` is None (it starts again from scratch).
        A sink that keeps one record per run (MLflow, W&B) notes the position instead, and continues
        that record when the run starts.

        ``since``: the Unix time the run's experiment was created (None when unknown). What was logged
        before it is another experiment's, whatever its tag (a file or folder experiments share), and
        stays. A ``rewind`` without this parameter is called without it.

        Called in the parent process before the resumed run starts, with no run writing.
        """

    def written_files(self) -> list[str]:
        """The files this sink writes that hold values now (none, by default: a sink that keeps no files).

        ``overwrite=True`` replaces what is in the experiment directory only: it warns of those outside it,
        which keep an earlier experiment's values beside the new call's.
        """
        return []

    def close(self) -> None:
        """Write everything buffered and release files. The callback may be used again."""

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in self._unpicklable:
            state[name] = None
        return state

    _unpicklable: tuple[str, ...] = ()


def scalar_name(key: str, tag: str, run_tag: str = "") -> str:
    """Name under which ``key`` logged with ``tag`` appears in TensorBoard, where every run shares one file.

    It is the metric's name in every other sink (:func:`metric_name`: what CSV, MLflow and W&B show)
    followed by the run's part of the tag: ``loss`` with ``agents/run_1`` is ``agents/loss/run_1``
    (``agents/loss`` in CSV, MLflow and W&B), ``ep_return`` with ``ep_return/run_1`` is
    ``ep_return/run_1``, with ``eval/ep_return/run_1`` it is ``eval/ep_return/run_1``. ``run_tag``
    (``lr=0.1/run_1`` in a sweep) is the run's part; without it, a last part ``run_<n>`` is.
    """
    if not run_tag or not (tag == run_tag or tag.endswith("/" + run_tag)):
        last = tag.rsplit("/", 1)[-1]
        run_tag = last if _RUN_PART.fullmatch(last) else ""
    metric = metric_name(key, tag, run_tag)
    return f"{metric}/{run_tag}" if run_tag else metric


_RUN_PART = re.compile(r"run_\d+")


def metric_name(key: str, tag: str, run_tag: str = "") -> str:
    """Name of ``key`` logged with ``tag`` in a sink that keeps one record per run (MLflow, W&B).

    The run's own part of the tag (``run_tag``) is taken off, so that every run's values share
    a name: ``ep_return`` with ``ep_return/run_1`` is ``ep_return``, ``loss`` with
    ``agents/run_1`` is ``agents/loss``, ``ep_return`` with ``eval/ep_return/run_1`` is
    ``eval/ep_return``. A key that is a part of what is left names the metric alone.
    """
    group = tag
    if run_tag and (tag == run_tag or tag.endswith("/" + run_tag)):
        group = tag[: -len(run_tag)].rstrip("/")
    if not group:
        return key
    return group if key in group.split("/") else f"{group}/{key}"


class AgentLogger(Protocol):
    """What the runner hands to ``agent.update`` as ``call_back``: ``call_back(data)`` logs ``data`` at :attr:`step`."""

    step: int
    """The env step the values are logged at; the runner sets it before each update."""

    def __call__(self, data: Mapping[str, Any]) -> None: ...


class StepLogger:
    """The ``call_back`` handed to ``agent.update``: ``call_back(data)`` logs ``data`` under ``tag`` at ``step``.

    The runner sets :attr:`step` to the env step before each update.
    """

    __slots__ = ("callback", "tag", "step")

    def __init__(self, callback: Any, tag: str) -> None:
        self.callback, self.tag, self.step = callback, tag, 0

    def __call__(self, data: Mapping[str, Any]) -> None:
        self.callback(data, self.tag, self.step)


def step_logger(callback: Any, tag: str) -> AgentLogger:
    """``callback.step_logger(tag)``, or a :class:`StepLogger` for a callback that has none (any callable sink)."""
    make = getattr(callback, "step_logger", None)
    return make(tag) if callable(make) else StepLogger(callback, tag)


def takes_wall_times(series: Any) -> bool:
    """Whether a sink's ``series`` takes ``wall_times`` (one written before the runner passed them does not).

    The answer is kept per function, so asking again about a method costs a dict lookup.
    """
    function = getattr(series, "__func__", series)
    known = _TAKES_WALL_TIMES.get(function) if inspect.isfunction(function) else None
    if known is None:
        try:
            parameters = list(inspect.signature(series).parameters.values())
        except (TypeError, ValueError):
            parameters = []
        known = any(p.name == "wall_times" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
        if inspect.isfunction(function):
            _TAKES_WALL_TIMES[function] = known
    return known


_TAKES_WALL_TIMES: dict[Any, bool] = {}
