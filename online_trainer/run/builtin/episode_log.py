"""The built-in hook that logs every episode's return and length through the run's callback, in batches."""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from online_trainer.callbacks.base import takes_wall_times
from online_trainer.loop.hook_protocol import Hook, RunContext

SEND_SECONDS = 1.0
"""While episodes end, they reach the callback at least this often (as the records reach ``metrics_run{i}.pkl``)."""
SEND_EPISODES = 1024
"""Episodes kept at most before they are sent: bounds what waits in memory when many end each second."""


class EpisodeLog(Hook):
    """Logs ``ep_return`` under ``ep_return/run_{i}`` and ``ep_length`` under ``ep_length/run_{i}``.

    The x value is the episode index under both budgets: unique within a run, so TensorBoard
    keeps every episode (episodes of several sub-envs can end on the same env step). Each point
    carries the wall time its episode ended at.

    Episodes are kept as they end and sent in batches: when :data:`SEND_EPISODES` are kept, when
    an episode ends :data:`SEND_SECONDS` after the last batch, before the run's full checkpoint
    records where the callback stands (:meth:`send`), when the run ends, and when it fails. A
    callback with ``series`` takes a batch in two calls (with ``wall_times`` when its ``series``
    takes them); another gets two calls an episode, forced. Sending per step cost a
    64-sub-env CartPole run a tenth of its time through ``TBCallBack``: about 3 episodes end at
    each vector step, and each call to a sink has a fixed cost. The run leaves this hook out
    when its callback is ``EmptyCallBack``, which would drop them.

    It also keeps the returns and lengths of the last ``window`` episodes, for the rolling means
    of :class:`~online_trainer.run.builtin.run_stats.RunStats` (:meth:`recent`).

    Args:
        callback: the run's callback.
        run_tag: ``run_{i}``, with a sweep's prefix.
        window: the episodes :meth:`recent` looks back over.
    """

    handles = frozenset({"on_episodes", "on_run_end"})

    def __init__(self, callback: Any, run_tag: str, window: int = 100) -> None:
        self.callback = callback
        self.return_tag, self.length_tag = f"ep_return/{run_tag}", f"ep_length/{run_tag}"
        series = getattr(callback, "series", None)
        self.series = series if callable(series) else None
        self.timed = self.series is not None and takes_wall_times(self.series)
        self.first = 0  # the index of the first episode kept
        self.returns: list[float] = []
        self.lengths: list[int] = []
        # when the episodes kept ended: times[k] for the episodes of counts[k]-th batch (one time a step)
        self.times: list[float] = []
        self.counts: list[int] = []
        self.deadline = time.time() + SEND_SECONDS
        self.window = window
        self.recent_returns: collections.deque[float] = collections.deque(maxlen=window)
        self.recent_lengths: collections.deque[int] = collections.deque(maxlen=window)

    def recent(self) -> tuple[list[float], list[int]]:
        """The returns and lengths of the last ``window`` episodes (fewer at the start), oldest first."""
        window = self.window
        returns = [*self.recent_returns, *self.returns[-window:]][-window:]
        lengths = [*self.recent_lengths, *self.lengths[-window:]][-window:]
        return returns, lengths

    def restore_recent(self, returns: Sequence[float], lengths: Sequence[int]) -> None:
        """Start :meth:`recent` from these (a resumed run's, from its full checkpoint)."""
        self.recent_returns.clear()
        self.recent_returns.extend(returns)
        self.recent_lengths.clear()
        self.recent_lengths.extend(lengths)

    def on_episodes(self, ctx: RunContext, first_index: int, returns: Sequence[float], lengths: Sequence[int]) -> None:
        kept = self.returns
        if not kept:
            self.first = first_index
        kept += returns
        self.lengths += lengths
        now = time.time()
        self.times.append(now)
        self.counts.append(len(returns))
        if now >= self.deadline or len(kept) >= SEND_EPISODES:
            self.send()

    def send(self) -> None:
        """Log the episodes kept, in order, and empty the batch."""
        self.deadline = time.time() + SEND_SECONDS
        if not self.returns:
            return
        # arrays made once for every sink (a list of Python numbers costs each sink a conversion)
        returns = np.array(self.returns, dtype=np.float64)
        lengths = np.array(self.lengths, dtype=np.int64)
        walls = np.repeat(np.array(self.times, dtype=np.float64), self.counts)
        self.recent_returns.extend(self.returns)
        self.recent_lengths.extend(self.lengths)
        self.returns, self.lengths, self.times, self.counts = [], [], [], []
        indices = range(self.first, self.first + len(returns))
        series = self.series
        if series is not None:
            if self.timed:
                series("ep_return", self.return_tag, returns, indices, wall_times=walls)
                series("ep_length", self.length_tag, lengths, indices, wall_times=walls)
            else:
                series("ep_return", self.return_tag, returns, indices)
                series("ep_length", self.length_tag, lengths, indices)
            return
        callback = self.callback  # without series(): one call a value
        for index, value, length in zip(indices, returns.tolist(), lengths.tolist()):
            callback({"ep_return": value}, self.return_tag, index, force=True)
            callback({"ep_length": length}, self.length_tag, index, force=True)

    def on_run_end(self, ctx: RunContext) -> None:
        """Every episode reaches the callback before the rest of the run's ending (the user's ``on_run_end`` too)."""
        self.send()

    def close(self) -> None:
        """Send what is kept, however the run ended: a failed run's episodes reach the callback too."""
        self.send()
