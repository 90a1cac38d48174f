"""What a run does as episodes end and step thresholds pass: callbacks, the metrics stream,
evaluations, checkpoints and progress."""

from __future__ import annotations

import io
import os
import time
from typing import TYPE_CHECKING, Any

from online_trainer.callbacks import EmptyCallBack
from online_trainer.core import resume, storage
from online_trainer.core.budget import INFINITY
from online_trainer.core.episodes import EpisodeTracker
from online_trainer.core.evaluation import Evaluator, RunEvaluations
from online_trainer.core.hooks import HookRunner
from online_trainer.core.loop import LoopState
from online_trainer.core.run_stats import RunStats
from online_trainer.core.progress import RunProgress

if TYPE_CHECKING:
    from online_trainer.core.run import RunSpec

PROGRESS_TICKS = 200  # step-budget bars move about this many times per run
FLUSH_SECONDS = 1.0  # while episodes end, records reach the disk at least this often
# Records per metrics chunk and sub-env, unless the user says how many. The one-second flush bounds what a crash
# loses; this bounds the records held between flushes (keep_records=False) and spares fast envs a chunk every few
# episodes (each chunk costs a pickle and a write: 10 per sub-env cost CartPole a point of overhead).
FLUSH_PER_SUB_ENV = 100


class RunEvents:
    """Handles every finished episode and step threshold of one run.

    The run's records are the columns of ``tracker.table``; they reach ``metrics_run{i}.pkl``
    in chunks of ``spec.options.metrics_flush_every`` records (default: :data:`FLUSH_PER_SUB_ENV` per
    sub-env; episodes that end on one step share a chunk), at once when an episode kept frames
    (frames go to the stream only), at least every :data:`FLUSH_SECONDS` while episodes end,
    and when the run ends.
    """

    def __init__(self, spec: RunSpec, agent: Any, progress: RunProgress, tracker: EpisodeTracker,
                 evaluator: Evaluator | None = None, hooks: HookRunner | None = None,
                 stats: RunStats | None = None, env: Any = None, outputs: dict[str, Any] | None = None) -> None:
        self.spec, self.agent, self.progress, self.tracker, self.env = spec, agent, progress, tracker, env
        self.callback = spec.callback
        self.snapshot_due = False  # a full checkpoint is due at the end of this step (see snapshot)
        self.preempted = False  # end the run as interrupted once that checkpoint is written
        self.outputs = outputs or {}  # where a resumed run's streams continue
        self.log_episodes = type(spec.callback) is not EmptyCallBack  # it would drop them: skip the calls
        self.return_tag = f"ep_return/{spec.tag_prefix}run_{spec.run_idx}"
        self.length_tag = f"ep_length/{spec.tag_prefix}run_{spec.run_idx}"
        self.stream = None
        if spec.exp_dir is not None and spec.options.dump_metrics:
            self.stream = storage.MetricsStream(storage.metrics_path(spec.exp_dir, spec.run_idx),
                                                resume_at=self.outputs.get("metrics"))
        self.flushing = self.stream is not None or not spec.options.keep_records  # records leave memory as they are written
        self.flush_every = spec.options.metrics_flush_every or FLUSH_PER_SUB_ENV * tracker.num_envs
        self.flushed = 0  # episodes written to the stream
        self.next_flush = self.flush_every
        self.flush_deadline = time.monotonic() + FLUSH_SECONDS
        budget = spec.budget
        self.by_episode = budget.num_episodes is not None
        self.checkpoint_freq = spec.options.checkpoint_freq
        self.next_checkpoint = INFINITY if spec.options.checkpoint_freq is None or self.by_episode else spec.options.checkpoint_freq
        self.progress_stride = INFINITY if self.by_episode else max(1, budget.total_steps // PROGRESS_TICKS)
        self.next_tick = self.progress_stride
        self.shown_steps = 0
        self.best_return = -INFINITY
        self.best_state: bytes | None = None  # torch-serialised, see _state_copy
        self.episodes = 0
        self.last_returns: Any = None  # of the episodes that ended last
        self.raw = tracker.raw if spec.options.score == "raw" else None  # the progress display shows raw scores
        self.evals: RunEvaluations | None = None
        if evaluator is not None:
            eval_stream = None
            if spec.exp_dir is not None and spec.options.dump_metrics:
                eval_stream = storage.MetricsStream(storage.evaluations_path(spec.exp_dir, spec.run_idx), 1,
                                                    resume_at=self.outputs.get("evaluations"))
            self.evals = RunEvaluations(evaluator, spec.options.eval_freq, self.by_episode, eval_stream, self.callback,
                                        f"{spec.tag_prefix}run_{spec.run_idx}", spec.options.checkpoint_freq is not None,
                                        progress)
        self.hooks, self.stats = hooks, stats
        if hooks is not None and self.evals is not None:
            self.evals.on_record = hooks.on_eval
        self.hook_episodes = hooks is not None and bool(hooks.episode_end)
        # The callback takes a batch's returns and lengths at once, when it can.
        self.log_series = getattr(self.callback, "series", None) if self.log_episodes else None
        # Episodes need a look one by one only for these; else a batch costs a few operations.
        self.each_episode = (self.log_episodes and self.log_series is None) or self.evals is not None \
            or self.checkpoint_freq is not None or self.hook_episodes

    def on_episodes(self, first_index: int, returns: Any, lengths: Any, global_step: int) -> bool:
        count = len(returns)
        self.episodes = first_index + count - 1
        if self.log_series is not None:
            # x is the episode index under both budgets: unique within a run, so TensorBoard keeps every
            # episode (episodes of several sub-envs can end on the same env step).
            indices = range(first_index, first_index + count)
            self.log_series("ep_return", self.return_tag, returns, indices)
            self.log_series("ep_length", self.length_tag, lengths, indices)
        if self.each_episode:
            for j in range(count):
                self._on_episode(first_index + j, float(returns[j]), int(lengths[j]), global_step)
        if self.flushing and (self.episodes >= self.next_flush or self.tracker.new_frames
                              or time.monotonic() >= self.flush_deadline):
            self.flush()
        self.last_returns = returns if self.raw is None else self.raw.last  # the bar shows the last one as it moves
        if self.by_episode:
            self.progress.episode_end(float(self.last_returns[-1]))
            self.progress.advance(count)
        if self.stats is not None:
            self.stats.add_batch(returns, lengths)
        if self.hooks is not None:
            self.hooks.ctx.episodes = self.episodes
            self.hooks.raise_if_stopped(global_step)
        return self.snapshot_due

    def _on_episode(self, index: int, ep_return: float, length: int, global_step: int) -> None:
        if self.log_episodes and self.log_series is None:  # a callback without series(): one call a value
            self.callback({"ep_return": ep_return}, self.return_tag, index, force=True)
            self.callback({"ep_length": length}, self.length_tag, index, force=True)
        if self.evals is not None and self.evals.due_after_episode(index):
            self.evals.evaluate(global_step, index)
        if self.checkpoint_freq is not None:
            if self.evals is None and ep_return > self.best_return:
                self.best_return = ep_return
                self.best_state = _state_copy(self.agent)
            if self.by_episode and index % self.checkpoint_freq == 0:
                self._save(f"E{index}")
        if self.hook_episodes:
            ctx = self.hooks.ctx
            ctx.global_step, ctx.episodes = global_step, index
            self.hooks.on_episode({"episode_index": index, "ep_return": ep_return, "ep_length": length,
                                   "global_step": global_step})

    def flush(self) -> None:
        """Write the records not yet in the stream as one chunk (frames then leave memory)."""
        tracker, table = self.tracker, self.tracker.table
        tracker.seal()
        if table.count > self.flushed:
            try:
                if self.stream is not None:
                    self.stream.write(table.chunk(self.flushed, table.count))
            finally:
                self.flushed = table.count
                self.next_flush = table.count + self.flush_every
                self.flush_deadline = time.monotonic() + FLUSH_SECONDS
                if tracker.new_frames and self.stream is not None:  # frames are kept in the stream only
                    table.drop_extra("frames")
                tracker.new_frames = False
                if not self.spec.options.keep_records:
                    table.clear()

    def on_step_event(self, global_step: int) -> float:
        if self.hooks is not None:
            self.hooks.ctx.global_step = global_step
        if self.evals is not None:
            self.evals.on_steps(global_step, self.episodes)
        while global_step >= self.next_checkpoint:
            self._save(f"S{int(self.next_checkpoint)}")
            self.next_checkpoint += self.checkpoint_freq
        if global_step >= self.next_tick:
            self._show_last_return()
            self.progress.advance(global_step - self.shown_steps)
            self.shown_steps = global_step
            self.next_tick = (global_step // self.progress_stride + 1) * self.progress_stride
        next_eval = self.evals.next_step if self.evals is not None else INFINITY
        next_hook = INFINITY
        if self.hooks is not None:
            if global_step >= self.hooks.next_step:
                self.hooks.on_steps(global_step)
                if self.hooks.ctx.preempt:
                    self.snapshot_due = self.preempted = True
            self.hooks.raise_if_stopped(global_step)
            next_hook = self.hooks.next_step
        return min(self.next_tick, self.next_checkpoint, next_eval, next_hook, self.spec.budget.max_steps)

    def _show_last_return(self) -> None:
        if self.last_returns is not None:
            self.progress.episode_end(float(self.last_returns[-1]))

    @staticmethod
    def serialised(state: Any) -> bytes:
        """``state`` as ``torch.save`` writes it."""
        import torch

        buffer = io.BytesIO()
        torch.save(state, buffer)
        return buffer.getvalue()

    def _save(self, label: str) -> None:
        if hasattr(self.agent, "save"):
            path = os.fspath(storage.checkpoint_path(self.spec.exp_dir, self.spec.run_idx, label))
            self.agent.save(path)
            self.snapshot_due = label != "Last"  # a periodic checkpoint: a full one at the end of the step
            if self.hooks is not None:
                self.hooks.on_checkpoint(path)

    def snapshot(self, loop: LoopState) -> None:
        """Write the run's full checkpoint (see :mod:`online_trainer.core.resume`) at this step boundary.

        Raises:
            Preempted: when the checkpoint was asked for by a preemption signal: the run ends as interrupted.
        """
        self.snapshot_due = False
        if self.spec.exp_dir is not None and callable(getattr(self.agent, "save", None)):
            resume.write(self.spec.exp_dir, self.spec.run_idx, self._full_state(loop))
        if self.preempted:
            raise resume.Preempted(self.spec.run_idx, loop.global_step)

    def _full_state(self, loop: LoopState) -> dict[str, Any]:
        spec = self.spec
        self.flush()
        outputs = {"metrics": None if self.stream is None else self.stream.position(),
                   "evaluations": None if self.evals is None or self.evals.stream is None
                   else self.evals.stream.position()}
        checkpoint = getattr(self.callback, "checkpoint", None)
        if callable(checkpoint):
            outputs["callback"] = checkpoint(f"{spec.tag_prefix}run_{spec.run_idx}")
        return {
            "run": spec.run_idx, "seed": spec.seed, "num_envs": self.tracker.num_envs, "loop": loop,
            "tracker": resume.tracker_bytes(self.tracker, keep_table=self.stream is None),
            "events": self.state_dict(),
            "agent": resume.agent_state(self.agent, spec.exp_dir, spec.run_idx, spec.options.checkpoint_buffers),
            "env": resume.env_bytes(self.env), "rng": resume.global_rng_state(), "outputs": outputs,
            "elapsed": time.perf_counter() - self.tracker.start_time,
        }

    def state_dict(self) -> dict[str, Any]:
        """The schedules and state of the run's handlers, for a full checkpoint."""
        return {
            "flushed": self.flushed, "next_flush": self.next_flush, "next_checkpoint": self.next_checkpoint,
            "next_tick": self.next_tick, "shown_steps": self.shown_steps, "best_return": self.best_return,
            "best_state": self.best_state, "episodes": self.episodes, "last_returns": self.last_returns,
            "evals": None if self.evals is None else self.evals.state_dict(),
            "hooks": None if self.hooks is None else self.hooks.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (a resumed run)."""
        for name in ("flushed", "next_flush", "next_checkpoint", "next_tick", "shown_steps", "best_return",
                     "best_state", "episodes", "last_returns"):
            setattr(self, name, state[name])
        if self.evals is not None and state["evals"] is not None:
            self.evals.load_state_dict(state["evals"])
        if self.hooks is not None and state["hooks"] is not None:
            self.hooks.load_state_dict(state["hooks"])

    def finish(self, completed: bool, global_step: int) -> None:
        """Evaluate a last time, flush the streams, and write the last and best checkpoints of a completed run."""
        self._show_last_return()
        if not self.by_episode and global_step > self.shown_steps:
            self.progress.advance(global_step - self.shown_steps)
        try:
            if completed and self.evals is not None:
                self.evals.finish(global_step, self.episodes)
        finally:
            try:
                if self.evals is not None and self.evals.stream is not None:
                    self.evals.stream.close()
            finally:
                try:
                    self.flush()
                finally:
                    if self.stream is not None:
                        self.stream.close()
        if completed and self.checkpoint_freq is not None and hasattr(self.agent, "save"):
            self._save("Last")
            if self.evals is not None:  # best by evaluation
                best = self.evals.best_state
                self.best_state = None if best is None else self.serialised(best)
            if self.best_state is not None:
                storage.write_atomic(storage.best_agent_path(self.spec.exp_dir, self.spec.run_idx), self.best_state)
        if completed and self.spec.exp_dir is not None:  # it will not be resumed
            storage.resume_path(self.spec.exp_dir, self.spec.run_idx).unlink(missing_ok=True)
        if completed and self.hooks is not None:
            self.hooks.ctx.global_step = global_step
            self.hooks.end()


def _state_copy(agent: Any) -> bytes | None:
    """``agent.save()`` now, torch-serialised: what ``Run{i}_Best_agent.t`` holds (None without ``save``).

    The bytes are a copy the agent cannot change later, so a new best costs one serialisation,
    not a deep copy now and a serialisation at the end.
    """
    save = getattr(agent, "save", None)
    return RunEvents.serialised(save()) if save is not None else None
