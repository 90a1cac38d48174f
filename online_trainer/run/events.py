"""What a run does as episodes end and step thresholds pass: a thin dispatcher over the run's hooks.

The runner's own jobs are built-in hooks of the interface users get (:mod:`online_trainer.run.hook_runner`),
called in this order before the user's hooks:

1. ``metrics``: :class:`~.metrics_flush.MetricsFlush`, the records to ``metrics_run{i}.pkl``, and their
   ``ep_return``/``ep_length`` to the callback (through :class:`~.episode_log.EpisodeLog`);
2. ``evaluations``: :class:`~.run_evaluations.RunEvaluations`, evaluations and their records;
3. ``checkpoints``: :class:`~.run_checkpoints.RunCheckpoints`, checkpoints and the best agent state;
4. ``progress``: :class:`~.progress_ticks.ProgressTicks`, the run's progress bar;
5. ``stats``: :class:`~.run_stats.RunStats`, SPS, rolling means and timing shares;
6. ``preemption``: :class:`~.preemption.PreemptionWatch`, a SIGTERM/SIGUSR1 check.

The names key their state in :meth:`HookRunner.state_dict <online_trainer.run.hook_runner.HookRunner.state_dict>`.
A job the run does not need is left out (evaluation without ``eval_freq``/``eval_env``,
checkpoints without ``checkpoint_freq`` or an agent ``save``, the episode log and stats with
``EmptyCallBack``).

:meth:`RunEvents.snapshot` writes the run's full checkpoint (:mod:`online_trainer.run.full_checkpoint`)
at the step boundary after each periodic checkpoint and on a preemption signal. A run that cannot write
one (no ``exp_dir``, no agent ``save`` and ``load``, or not training) stops there all the same on the signal.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from online_trainer.callbacks import EmptyCallBack
from online_trainer.errors import Preempted
from online_trainer.loop.accounting import EpisodeTracker
from online_trainer.loop.evaluation import Evaluator
from online_trainer.loop.hook_protocol import RunContext
from online_trainer.loop.normalization import running_state
from online_trainer.loop.steps import LoopState
from online_trainer.progress.display import RunProgress
from online_trainer.records import storage
from online_trainer.run import full_checkpoint
from online_trainer.run.builtin.checkpoint_writer import RunCheckpoints, remove_checkpoint
from online_trainer.run.builtin.episode_log import EpisodeLog
from online_trainer.run.builtin.metrics_flush import MetricsFlush
from online_trainer.run.builtin.preemption import PreemptionWatch
from online_trainer.run.builtin.progress_ticks import ProgressTicks
from online_trainer.run.builtin.run_stats import RunStats
from online_trainer.run.builtin.scheduled_evaluation import RunEvaluations
from online_trainer.run.hook_runner import HookRunner

if TYPE_CHECKING:
    from online_trainer.run.one_run import RunSpec


class RunEvents:
    """What the loop tells the rest of the run (:class:`~online_trainer.loop.steps.LoopEvents`), handed to its hooks.

    ``on_episodes`` is the hook runner's (every hook's ``on_episodes``, then every
    ``on_episode_end``); :meth:`on_step_event` calls the ``on_step`` of each hook due and
    returns the next step at which one may be due (or the end of the step budget), so that the
    loop pays one comparison a step for all of them.

    Args:
        spec: the run.
        hooks: the run's hooks, built-ins first (see :func:`run_events`).
        tracker: the run's episode tracker.
        metrics: the built-in metrics hook.
        evaluations: the built-in evaluation hook, when the run evaluates.
        checkpoints: the built-in checkpoint hook, when the run writes checkpoints.
    """

    def __init__(
        self,
        spec: RunSpec,
        hooks: HookRunner,
        tracker: EpisodeTracker,
        metrics: MetricsFlush,
        evaluations: RunEvaluations | None = None,
        checkpoints: RunCheckpoints | None = None,
    ) -> None:
        self.spec, self.hooks, self.tracker, self.metrics = spec, hooks, tracker, metrics
        self.evaluations, self.checkpoints = evaluations, checkpoints
        self.max_steps = spec.options.budget.max_steps
        self.preempted = False  # end the run as interrupted once its full checkpoint is written
        self.on_episodes = hooks.on_episodes

    @property
    def snapshot_due(self) -> bool:
        """A full checkpoint is due at the end of this step (see :meth:`snapshot`): a hook announced a
        checkpoint (``ctx.checkpointed``), or a preemption signal came."""
        return self.hooks.checkpoint_written or self.preempted

    @property
    def episodes(self) -> int:
        """Episodes finished so far."""
        return self.hooks.ctx.episodes

    def on_step_event(self, global_step: int) -> float:
        hooks = self.hooks
        hooks.on_steps(global_step)
        if hooks.ctx.preempt:
            self.preempted = True
        next_step = hooks.next_step
        return next_step if next_step < self.max_steps else self.max_steps

    def start(self) -> None:
        """Every hook's ``on_run_start``; raise :class:`~.hooks.StopRun` when one asked to stop."""
        self.hooks.start()
        self.hooks.raise_if_stopped(self.hooks.ctx.global_step)

    def snapshot(self, loop: LoopState) -> None:
        """Write the run's full checkpoint (see :mod:`online_trainer.run.full_checkpoint`) at this step boundary.

        Raises:
            Preempted: when the checkpoint was asked for by a preemption signal: the run ends as interrupted.
        """
        self.hooks.checkpoint_written = False
        spec, agent = self.spec, self.hooks.ctx.agent
        why = _no_full_checkpoint(spec, agent)
        if why is None:
            assert spec.exp_dir is not None  # _no_full_checkpoint says so without one
            full_checkpoint.write(spec.exp_dir, spec.run_idx, self._full_state(loop), callback=spec.callback)
        if self.preempted:
            raise Preempted(
                spec.run_idx, loop.global_step, why is None, why or "", spec.exp_dir is not None, name=spec.name
            )

    def _full_state(self, loop: LoopState) -> full_checkpoint.FullCheckpoint:
        spec, ctx, metrics = self.spec, self.hooks.ctx, self.metrics
        assert spec.exp_dir is not None  # a full checkpoint is written only into an experiment directory
        metrics.flush()
        evaluations = self.evaluations
        outputs = {
            "metrics": None if metrics.stream is None else metrics.stream.position(),
            "evaluations": None if evaluations is None or evaluations.stream is None else evaluations.stream.position(),
        }
        checkpoint = getattr(ctx.callback, "checkpoint", None)
        if callable(checkpoint):
            outputs["callback"] = checkpoint(ctx.run_tag)
        env = full_checkpoint.env_bytes(ctx.env)
        return full_checkpoint.FullCheckpoint(
            run=spec.run_idx,
            seed=spec.seed,
            num_envs=self.tracker.num_envs,
            loop=loop,
            tracker=self.tracker.to_state(keep_table=metrics.stream is None),
            events=self.hooks.state_dict(),
            agent=full_checkpoint.agent_state(ctx.agent, spec.exp_dir, spec.run_idx, spec.options.checkpoints.buffers),
            env=env,
            normalization=None if env is not None else running_state(ctx.env),
            rng=full_checkpoint.global_rng_state(),
            outputs=outputs,
            elapsed=time.perf_counter() - self.tracker.start_time,
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the hooks' state from a full checkpoint's ``events`` (a resumed run, before :meth:`start`)."""
        self.hooks.load_state_dict(state)

    def finish(self, completed: bool, global_step: int) -> None:
        """End the run's hooks: for a completed run (its budget spent, or stopped by a hook) every hook's
        ``on_run_end`` in order (the final evaluation, the last flush, the last and best checkpoints, then
        the user's), and its full checkpoint is removed (it will not be resumed); in any case every hook's
        ``close`` (the streams are flushed and closed).

        ``global_step``: where the run ended; for one that did not complete, the step it reached (0: not known)."""
        try:
            if completed or global_step > self.hooks.ctx.global_step:
                self.hooks.ctx.global_step = global_step
            if completed:
                self.hooks.end()
                if self.spec.exp_dir is not None:
                    storage.resume_path(self.spec.exp_dir, self.spec.run_idx).unlink(missing_ok=True)
                    # what an agent whose save() returns no state saved for it (full_checkpoint.agent_state)
                    remove_checkpoint(storage.checkpoint_path(self.spec.exp_dir, self.spec.run_idx, "Resume_agent"))
        finally:
            self.hooks.close()


def run_events(
    spec: RunSpec,
    env: Any,
    agent: Any,
    progress: RunProgress,
    tracker: EpisodeTracker,
    evaluator: Evaluator | None = None,
    outputs: dict[str, Any] | None = None,
) -> RunEvents:
    """The run's events: its context, its built-in hooks in their order, then a copy of each of the user's.

    Opens the run's metrics and evaluation streams (``exp_dir`` with ``dump_metrics``); a resumed
    run's continue from ``outputs`` (the positions its full checkpoint recorded).
    """
    options, callback, outputs = spec.options, spec.callback, outputs or {}
    run_tag = f"{spec.tag_prefix}run_{spec.run_idx}"
    ctx = RunContext(spec.run_idx, spec.seed, env, agent, spec.exp_dir, callback, run_tag)
    by_episode = options.budget.num_episodes is not None
    streams = spec.exp_dir is not None and options.dump_metrics
    stream = None
    if streams and spec.exp_dir is not None:
        stream = storage.MetricsStream(
            storage.metrics_path(spec.exp_dir, spec.run_idx), resume_at=outputs.get("metrics")
        )
    episode_log = None
    if type(callback) is not EmptyCallBack:  # it would drop them: skip the calls
        episode_log = EpisodeLog(callback, run_tag, tracker, options.records.stats_window)
    metrics = MetricsFlush(tracker, stream, options.records.flush_every, options.records.in_memory, episode_log)
    builtin: dict[str, Any] = {"metrics": metrics}
    evaluations = checkpoints = None
    if evaluator is not None:
        assert options.evaluation is not None  # an evaluator is made from the evaluation options
        eval_stream = None
        if streams and spec.exp_dir is not None:
            eval_stream = storage.MetricsStream(
                storage.evaluations_path(spec.exp_dir, spec.run_idx), 1, resume_at=outputs.get("evaluations")
            )
        evaluations = builtin["evaluations"] = RunEvaluations(
            evaluator, options.evaluation.freq, by_episode, eval_stream, callback, run_tag
        )
    # checkpoint_freq needs an exp_dir (RunOptions checks it)
    if options.checkpoint_freq is not None and spec.exp_dir is not None and callable(getattr(agent, "save", None)):
        checkpoints = builtin["checkpoints"] = RunCheckpoints(
            agent,
            spec.exp_dir,
            spec.run_idx,
            options.checkpoint_freq,
            by_episode,
            evaluations,
            options.checkpoints.keep,
        )
    builtin["progress"] = ProgressTicks(
        progress, options.budget, tracker, tracker.raw if options.records.score == "raw" else None
    )
    if episode_log is not None and not isinstance(callback, EmptyCallBack):
        builtin["stats"] = RunStats(episode_log, options.records.stats_every_steps)
    # a preemption signal is answered with a full checkpoint, or, for a run that cannot write one, a stop
    builtin["preemption"] = PreemptionWatch()
    hooks = HookRunner(options.hooks, ctx, builtin)
    return RunEvents(spec, hooks, tracker, metrics, evaluations, checkpoints)


def _no_full_checkpoint(spec: RunSpec, agent: Any) -> str | None:
    """Why the run cannot write a full checkpoint, in words; None when it can."""
    if spec.exp_dir is None:
        return "the call has no exp_dir"
    if not spec.train:
        return "the run does not train"
    if not full_checkpoint.can_continue(agent):
        missing = [f"{name}()" for name in ("save", "load") if not callable(getattr(agent, name, None))]
        return f"its agent, {type(agent).__name__}, has no {' and '.join(missing)}"
    return None
