"""What a run does as episodes end and step thresholds pass: a thin dispatcher over the run's hooks.

The runner's own jobs are built-in hooks of the interface users get (:mod:`online_trainer.core.hooks`),
called in this order before the user's hooks:

1. ``metrics``: :class:`~.metrics_flush.MetricsFlush`, the records to ``metrics_run{i}.pkl``;
2. ``episode_log``: :class:`~.episode_log.EpisodeLog`, ``ep_return``/``ep_length`` to the callback;
3. ``evaluations``: :class:`~.run_evaluations.RunEvaluations`, evaluations and their records;
4. ``checkpoints``: :class:`~.run_checkpoints.RunCheckpoints`, checkpoints and the best agent state;
5. ``progress``: :class:`~.progress_ticks.ProgressTicks`, the run's progress bar;
6. ``stats``: :class:`~.run_stats.RunStats`, SPS, rolling means and timing shares.

The names key their state in :meth:`HookRunner.state_dict <online_trainer.core.hooks.HookRunner.state_dict>`.
A job the run does not need is left out (evaluation without ``eval_freq``/``eval_env``,
checkpoints without ``checkpoint_freq``, the episode log and stats with ``EmptyCallBack``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from online_trainer.callbacks import EmptyCallBack
from online_trainer.core import storage
from online_trainer.core.episode_log import EpisodeLog
from online_trainer.core.episodes import EpisodeTracker
from online_trainer.core.evaluation import Evaluator
from online_trainer.core.hooks import HookRunner, RunContext
from online_trainer.core.metrics_flush import MetricsFlush
from online_trainer.core.progress import RunProgress
from online_trainer.core.progress_ticks import ProgressTicks
from online_trainer.core.run_checkpoints import RunCheckpoints
from online_trainer.core.run_evaluations import RunEvaluations
from online_trainer.core.run_stats import RunStats

if TYPE_CHECKING:
    from online_trainer.core.run import RunSpec


class RunEvents:
    """What the loop tells the rest of the run (:class:`~online_trainer.core.loop.LoopEvents`), handed to its hooks.

    ``on_episodes(first_index, returns, lengths, global_step)`` is the hook runner's own
    (every hook's ``on_episodes``, then every ``on_episode_end``); :meth:`on_step_event` calls
    the ``on_step`` of each hook due and returns the next step at which one may be due (or
    the end of the step budget), so that the loop pays one comparison a step for all of them.

    Args:
        hooks: the run's hooks, built-ins first (see :func:`run_events`).
        max_steps: the step budget (infinity under an episode budget).
        evaluations: the built-in evaluation hook, when the run evaluates.
        checkpoints: the built-in checkpoint hook, when the run writes checkpoints.
    """

    def __init__(self, hooks: HookRunner, max_steps: float, evaluations: RunEvaluations | None = None,
                 checkpoints: RunCheckpoints | None = None) -> None:
        self.hooks, self.max_steps = hooks, max_steps
        self.evaluations, self.checkpoints = evaluations, checkpoints
        self.on_episodes = hooks.on_episodes

    @property
    def episodes(self) -> int:
        """Episodes finished so far."""
        return self.hooks.ctx.episodes

    def on_step_event(self, global_step: int) -> float:
        hooks = self.hooks
        hooks.on_steps(global_step)
        next_step = hooks.next_step
        return next_step if next_step < self.max_steps else self.max_steps

    def start(self) -> None:
        """Every hook's ``on_run_start``; raise :class:`~.hooks.StopRun` when one asked to stop."""
        self.hooks.start()
        self.hooks.raise_if_stopped(0)

    def finish(self, completed: bool, global_step: int) -> None:
        """End the run's hooks: for a completed run (its budget spent, or stopped by a hook) every hook's
        ``on_run_end`` in order (the final evaluation, the last flush, the last and best checkpoints, then
        the user's); in any case every hook's ``close`` (the streams are flushed and closed)."""
        try:
            if completed:
                self.hooks.ctx.global_step = global_step
                self.hooks.end()
        finally:
            self.hooks.close()


def run_events(spec: RunSpec, env: Any, agent: Any, progress: RunProgress, tracker: EpisodeTracker,
               evaluator: Evaluator | None = None) -> RunEvents:
    """The run's events: its context, its built-in hooks in their order, then a copy of each of the user's.

    Opens the run's metrics and evaluation streams (``exp_dir`` with ``dump_metrics``).
    """
    options, callback = spec.options, spec.callback
    run_tag = f"{spec.tag_prefix}run_{spec.run_idx}"
    ctx = RunContext(spec.run_idx, spec.seed, env, agent, spec.exp_dir, callback, run_tag)
    by_episode = options.budget.num_episodes is not None
    streams = spec.exp_dir is not None and options.dump_metrics
    stream = storage.MetricsStream(storage.metrics_path(spec.exp_dir, spec.run_idx)) if streams else None
    builtin: dict[str, Any] = {"metrics": MetricsFlush(tracker, stream, options.metrics_flush_every,
                                                       options.keep_records)}
    if type(callback) is not EmptyCallBack:  # it would drop them: skip the calls
        builtin["episode_log"] = EpisodeLog(callback, run_tag)
    evaluations = checkpoints = None
    if evaluator is not None:
        eval_stream = None
        if streams:
            eval_stream = storage.MetricsStream(storage.evaluations_path(spec.exp_dir, spec.run_idx), 1)
        evaluations = builtin["evaluations"] = RunEvaluations(evaluator, options.eval_freq, by_episode, eval_stream,
                                                              callback, run_tag)
    if options.checkpoint_freq is not None:
        checkpoints = builtin["checkpoints"] = RunCheckpoints(
            agent, spec.exp_dir, spec.run_idx, options.checkpoint_freq, by_episode, evaluator is not None,
            options.keep_checkpoints, options.checkpoint_buffers)
    builtin["progress"] = ProgressTicks(progress, options.budget)
    if not isinstance(callback, EmptyCallBack):
        builtin["stats"] = RunStats(options.stats_window, options.stats_every_steps)
    hooks = HookRunner(options.hooks, ctx, builtin)
    if evaluations is not None:
        evaluations.on_record = hooks.on_eval
    if checkpoints is not None:
        checkpoints.on_saved = hooks.on_checkpoint
    return RunEvents(hooks, options.budget.max_steps, evaluations, checkpoints)
