"""What sends every episode's return and length to the run's callback, as the records leave the tracker."""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from online_trainer.callbacks.base import takes_wall_times
from online_trainer.loop.accounting import EpisodeTracker


class EpisodeLog:
    """Logs ``ep_return`` under ``ep_return/run_{i}`` and ``ep_length`` under ``ep_length/run_{i}``.

    The x value is the episode index under both budgets: unique within a run, so TensorBoard
    keeps every episode (episodes of several sub-envs can end on the same env step). Each point
    carries the wall time its episode ended at.

    Episodes reach the callback in the batches the metrics hook
    (:class:`~online_trainer.run.builtin.metrics_flush.MetricsFlush`) seals into the run's table:
    at least every second while episodes end, before a full checkpoint records where the callback
    stands, when the run ends, and when it fails. A callback with ``series`` takes a batch in two
    calls (with ``wall_times`` when its ``series`` takes them); another gets two calls an episode,
    forced. The loop itself pays nothing per episode for them: sending at every env step cost a
    64-sub-env CartPole run a tenth of its time through ``TBCallBack`` (about 3 episodes end at
    each vector step, and every call to a hook and a sink has a fixed cost). The run makes no
    episode log when its callback is ``EmptyCallBack``, which would drop them.

    It also keeps the returns and lengths of the last ``window`` episodes, for the rolling means
    of :class:`~online_trainer.run.builtin.run_stats.RunStats` (:meth:`recent`).

    Args:
        callback: the run's callback.
        run_tag: ``run_{i}``, with a sweep's prefix.
        tracker: the run's episode tracker (its episodes not yet sealed count in :meth:`recent`).
        window: the episodes :meth:`recent` looks back over.
    """

    def __init__(self, callback: Any, run_tag: str, tracker: EpisodeTracker, window: int = 100) -> None:
        self.callback, self.tracker = callback, tracker
        self.return_tag, self.length_tag = f"ep_return/{run_tag}", f"ep_length/{run_tag}"
        series = getattr(callback, "series", None)
        self.series = series if callable(series) else None
        self.timed = self.series is not None and takes_wall_times(self.series)
        # the table's times are seconds since the tracker's start_time (a perf_counter reading)
        self.epoch = time.time() - time.perf_counter()
        self.window = window
        self.recent_returns: collections.deque[float] = collections.deque(maxlen=window)
        self.recent_lengths: collections.deque[int] = collections.deque(maxlen=window)

    def send(self, first: int, returns: Sequence[float], lengths: Sequence[int], times: Sequence[float]) -> None:
        """Log episodes ``first + 1, first + 2, ...`` (positions ``first, ...`` of the table), which ended
        ``times`` seconds after the tracker started, in order."""
        count = len(returns)
        if not count:
            return
        self.recent_returns.extend(returns)
        self.recent_lengths.extend(lengths)
        # arrays made once for every sink (a list of Python numbers costs each sink a conversion)
        values = np.array(returns, dtype=np.float64)
        steps = np.array(lengths, dtype=np.int64)
        indices = range(first + 1, first + 1 + count)
        series = self.series
        if series is not None:
            if self.timed:
                walls = np.array(times, dtype=np.float64) + (self.epoch + self.tracker.start_time)
                series("ep_return", self.return_tag, values, indices, wall_times=walls)
                series("ep_length", self.length_tag, steps, indices, wall_times=walls)
            else:
                series("ep_return", self.return_tag, values, indices)
                series("ep_length", self.length_tag, steps, indices)
            return
        callback = self.callback  # without series(): one call a value
        for index, value, length in zip(indices, returns, lengths):
            callback({"ep_return": float(value)}, self.return_tag, index, force=True)
            callback({"ep_length": int(length)}, self.length_tag, index, force=True)

    def recent(self) -> tuple[list[float], list[int]]:
        """The returns and lengths of the last ``window`` episodes (fewer at the start), oldest first."""
        window = self.window
        pending_returns, pending_lengths = self.tracker.unsealed()
        returns = [*self.recent_returns, *pending_returns[-window:]][-window:]
        lengths = [*self.recent_lengths, *pending_lengths[-window:]][-window:]
        return returns, lengths

    def restore_recent(self, returns: Sequence[float], lengths: Sequence[int]) -> None:
        """Start :meth:`recent` from these (a resumed run's, from its full checkpoint)."""
        self.recent_returns.clear()
        self.recent_returns.extend(returns)
        self.recent_lengths.clear()
        self.recent_lengths.extend(lengths)
