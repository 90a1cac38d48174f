"""The built-in hook that moves a run's progress bar: episodes, step ticks, the last return and evaluation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from online_trainer.loop.accounting import EpisodeTracker
from online_trainer.loop.budget import Budget
from online_trainer.loop.hook_protocol import Hook, RunContext
from online_trainer.progress.display import RunProgress

PROGRESS_TICKS = 200  # step-budget bars move about this many times per run


class ProgressTicks(Hook):
    """Reports a run's progress to its bar.

    Under an episode budget the bar moves at every batch of episodes; under a step budget
    about :data:`PROGRESS_TICKS` times a run (its ``on_step``, every ``total_steps // 200``
    env steps, at the cadence of every hook), showing the last episode's return, which it
    reads from the tracker then (so it takes no ``on_episodes``: a run of many sub-envs ends
    episodes at nearly every step). Each evaluation's mean is shown as it ends.

    Args:
        progress: the run's bar.
        budget: the run's budget.
        tracker: the run's episode tracker (its last return).
        raw: the run's raw-score reader (``score="raw"``): the bar shows raw scores; None shows returns.
    """

    def __init__(self, progress: RunProgress, budget: Budget, tracker: EpisodeTracker, raw: Any = None) -> None:
        self.progress, self.tracker, self.raw = progress, tracker, raw
        self.by_episode = budget.num_episodes is not None
        self.every_steps = None if self.by_episode else max(1, budget.total // PROGRESS_TICKS)
        self.handles = frozenset(
            {"on_episodes", "on_eval", "on_run_end"} if self.by_episode else {"on_step", "on_eval", "on_run_end"}
        )
        self.shown_steps = 0
        self.shown_episodes = 0
        self.ended = False
        self.ctx: RunContext | None = None  # the run's context, from its first step tick (read by close)

    def on_episodes(self, ctx: RunContext, first_index: int, returns: Sequence[float], lengths: Sequence[int]) -> None:
        """Under an episode budget: the bar moves by the episodes that ended and shows the last one's return."""
        if self.raw is not None:
            returns = self.raw.last
        self.shown_episodes = ctx.episodes
        self.progress.episode_end(float(returns[-1]))
        self.progress.advance(len(returns))

    def on_step(self, ctx: RunContext) -> None:
        """Under a step budget: the bar moves to this step and shows the last return."""
        self.ctx = ctx
        self.shown_episodes = ctx.episodes
        self._show_last_return()
        self.progress.advance(ctx.global_step - self.shown_steps)
        self.shown_steps = ctx.global_step

    def on_eval(self, ctx: RunContext, result: dict[str, Any]) -> None:
        self.progress.eval_end(result["mean"])

    def _show_last_return(self) -> None:
        """Show the return of the last episode that ended (under a step budget; none yet: nothing)."""
        if self.by_episode:
            return
        if self.raw is not None:
            last = self.raw.last
            if last is not None and len(last):
                self.progress.episode_end(float(last[-1]))
        elif self.tracker.last_return is not None:
            self.progress.episode_end(self.tracker.last_return)

    def on_run_end(self, ctx: RunContext) -> None:
        """The bar reaches the run's last step."""
        self.ended = True
        self._show_last_return()
        if not self.by_episode and ctx.global_step > self.shown_steps:
            self.progress.advance(ctx.global_step - self.shown_steps)
            self.shown_steps = ctx.global_step

    def close(self) -> None:
        """A run that failed or was interrupted shows the last return it had and, under a step budget, the step it
        reached (its manifest's count; the bar had moved at the last tick)."""
        if self.ended:
            return
        self._show_last_return()
        ctx = self.ctx
        if ctx is not None and ctx.global_step > self.shown_steps:
            self.progress.advance(ctx.global_step - self.shown_steps)
            self.shown_steps = ctx.global_step

    def state_dict(self) -> dict[str, Any]:
        """``shown_steps``: the env steps the bar shows (step budget); ``episodes``: the episodes it shows."""
        return {"shown_steps": self.shown_steps, "episodes": self.shown_episodes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the state and start the (new) bar where the run stood, not counted in its rate."""
        self.shown_steps, self.shown_episodes = int(state["shown_steps"]), int(state["episodes"])
        self.progress.resume_at(self.shown_episodes if self.by_episode else self.shown_steps)
