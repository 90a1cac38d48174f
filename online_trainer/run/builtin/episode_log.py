"""The built-in hook that logs every episode's return and length through the run's callback."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from online_trainer.loop.hook_protocol import Hook, RunContext


class EpisodeLog(Hook):
    """Logs ``ep_return`` under ``ep_return/run_{i}`` and ``ep_length`` under ``ep_length/run_{i}``.

    The x value is the episode index under both budgets: unique within a run, so TensorBoard
    keeps every episode (episodes of several sub-envs can end on the same env step). A callback
    with ``series`` takes a batch's returns and lengths in two calls; another gets two calls
    an episode. The run leaves this hook out when its callback is ``EmptyCallBack``, which would
    drop them. It keeps no state.

    Args:
        callback: the run's callback.
        run_tag: ``run_{i}``, with a sweep's prefix.
    """

    def __init__(self, callback: Any, run_tag: str) -> None:
        self.callback = callback
        self.return_tag, self.length_tag = f"ep_return/{run_tag}", f"ep_length/{run_tag}"
        self.series = getattr(callback, "series", None)

    def on_episodes(self, ctx: RunContext, first_index: int, returns: Sequence[float], lengths: Sequence[int]) -> None:
        series = self.series
        if series is not None:
            indices = range(first_index, first_index + len(returns))
            series("ep_return", self.return_tag, returns, indices)
            series("ep_length", self.length_tag, lengths, indices)
            return
        callback = self.callback  # without series(): one call a value
        for j in range(len(returns)):
            callback({"ep_return": float(returns[j])}, self.return_tag, first_index + j, force=True)
            callback({"ep_length": int(lengths[j])}, self.length_tag, first_index + j, force=True)
