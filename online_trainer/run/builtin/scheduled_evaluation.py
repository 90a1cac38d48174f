"""The built-in hook that evaluates a run's agent on schedule and routes each evaluation record."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from online_trainer.loop.evaluation import Evaluator
from online_trainer.loop.hook_protocol import Hook, RunContext


class RunEvaluations(Hook):
    """A run's evaluations: when they are due, and where their records go.

    Under a step budget it evaluates every ``freq`` env steps (its ``on_step``, at the
    ``every_steps`` cadence of every hook); under an episode budget after every ``freq``-th
    episode (its ``on_episodes``); and once at the end of the run (its ``on_run_end``), unless
    an evaluation was just made at that step.

    Each record goes to ``exp_dir/eval_run{i}.pkl`` (one chunk per evaluation, so a killed run
    keeps every evaluation it finished), to memory (:attr:`records`), to the callback as the
    mean return and length under ``eval/ep_return/run_{i}`` and ``eval/ep_length/run_{i}`` at
    the env step, and then to every hook's ``on_eval`` (announced through
    :meth:`RunContext.evaluated <online_trainer.loop.hook_protocol.RunContext.evaluated>`: the run's
    checkpoints keep the best agent state from it, its progress bar shows the mean, then the
    user's hooks).
    A filmed evaluation's frames go to the mp4 file and, when the callback has a ``video``
    method, to ``callback.video("eval/video/run_{i}", frames, fps, step)``; no record holds them.

    Args:
        evaluator: plays the evaluations.
        freq: evaluate every this many env steps (``by_episode`` False) or finished episodes;
            None: at the end only.
        by_episode: the run has an episode budget.
        stream: the evaluation stream, or None.
        callback: the run's callback.
        tag: ``run_{i}`` with the sweep's prefix.
    """

    def __init__(
        self, evaluator: Evaluator, freq: int | None, by_episode: bool, stream: Any, callback: Any, tag: str
    ) -> None:
        self.evaluator, self.freq, self.by_episode, self.stream, self.callback = (
            evaluator,
            freq,
            by_episode,
            stream,
            callback,
        )
        self.return_tag, self.length_tag = f"eval/ep_return/{tag}", f"eval/ep_length/{tag}"
        self.video_tag = f"eval/video/{tag}"
        self.on_video = self._video if callable(getattr(callback, "video", None)) else None
        self.records: list[dict[str, Any]] = []
        self.every_steps = freq if freq is not None and not by_episode else None
        periodic = () if freq is None else ("on_episodes",) if by_episode else ("on_step",)
        self.handles = frozenset({"on_run_end", *periodic})
        self.closed = False

    def on_step(self, ctx: RunContext) -> None:
        self.evaluate(ctx, ctx.global_step, ctx.episodes)

    def on_episodes(self, ctx: RunContext, first_index: int, returns: Sequence[float], lengths: Sequence[int]) -> None:
        freq = self.freq
        assert freq is not None  # on_episodes is handled only with a freq
        index = -(-first_index // freq) * freq  # the first multiple of freq among the batch's indices
        last = first_index + len(returns) - 1
        while index <= last:
            self.evaluate(ctx, ctx.global_step, index)
            index += freq

    def evaluate(self, ctx: RunContext, global_step: int, episodes: int, scheduled: bool = True) -> dict[str, Any]:
        """Play an evaluation now, route its record (``ctx.evaluated`` last), and return it.

        ``scheduled`` (recorded): the evaluation is at a point of the budget every run of the experiment
        reaches (every ``freq``, or the budget's end), so that the runs' k-th ones line up; False for the final
        evaluation of a run a hook stopped before its budget's end.
        """
        record = self.evaluator.evaluate(global_step, episodes, self.on_video)
        record["scheduled"] = scheduled
        self.records.append(record)
        if self.stream is not None:
            self.stream.append(record)
            self.stream.flush()
        self.callback({"ep_return": record["mean"]}, self.return_tag, global_step, force=True)
        self.callback({"ep_length": float(record["lengths"].mean())}, self.length_tag, global_step, force=True)
        ctx.evaluated(record)
        return record

    def _video(self, frames: list[np.ndarray], fps: float, step: int) -> None:
        self.callback.video(self.video_tag, frames, fps, step)

    def on_run_end(self, ctx: RunContext) -> None:
        """The final evaluation, unless one was just made at this step."""
        if self.evaluator.last_step != ctx.global_step:
            self.evaluate(ctx, ctx.global_step, ctx.episodes, scheduled=ctx.stop_reason is None)

    def close(self) -> None:
        """Close the evaluation stream (once), however the run ended."""
        if not self.closed:
            self.closed = True
            if self.stream is not None:
                self.stream.close()

    def state_dict(self) -> dict[str, Any]:
        """``count``: evaluations made (numbers the next one, and its video); ``last_step``: the env step of
        the last one; ``records``: every evaluation record so far (copies of their arrays)."""
        return {
            "count": self.evaluator.count,
            "last_step": self.evaluator.last_step,
            "records": [
                {k: np.copy(v) if isinstance(v, np.ndarray) else v for k, v in r.items()} for r in self.records
            ],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``; the videos of evaluations after it (made before the run was cut off, then cut
        back with the evaluation stream) are removed: the run films them again, maybe at other steps."""
        self.evaluator.count, self.evaluator.last_step = int(state["count"]), int(state["last_step"])
        self.records = [dict(r) for r in state["records"]]
        video_dir = self.evaluator.video_dir
        if video_dir is not None:
            for path in Path(video_dir).glob("eval*_step*.mp4"):
                index = path.name[4:].split("_", 1)[0]
                if index.isdigit() and int(index) > self.evaluator.count:
                    path.unlink(missing_ok=True)
