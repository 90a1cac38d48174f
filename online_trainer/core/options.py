"""What every run of an experiment shares, as one frozen, validated object.

A run's :class:`~online_trainer.core.run.RunSpec` holds it as it is: adding an option means a
field here (with its docstring and check), the code that uses it, and its docs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from online_trainer.core import raw_scores, validation
from online_trainer.core.budget import Budget
from online_trainer.core.hooks import check_hooks


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """What every run of an experiment shares; validated when built.

    Raises:
        ValueError: naming the first bad field and its value.
    """

    num_episodes: int | None = None
    """Stop each run after exactly this many finished episodes (all sub-envs together)."""
    total_steps: int | None = None
    """Stop each run after this many env steps (real transitions of all sub-envs together)."""
    checkpoint_freq: int | None = None
    """Save the agent every this many episodes (episode budget) or env steps (step budget)."""
    keep_checkpoints: int | None = None
    """Keep only the last this many periodic checkpoints of each run (``Run{i}_S*``/``Run{i}_E*``; ``Run{i}_Last``
    and ``Run{i}_Best_agent.t`` are never deleted); None keeps them all."""
    checkpoint_buffers: bool = False
    """Put the agent's replay buffer in the run's full checkpoint (``save(buffers=True)``, for agents whose ``save``
    takes ``buffers``), so that a resumed off-policy run continues exactly; without it the buffer starts empty
    again after a resume. Periodic checkpoints hold it as the agent's own setting says (``save_buffer``); the best
    state never does."""
    dump_metrics: bool = True
    """Stream records to ``exp_dir/metrics_run{i}.pkl`` (needs an exp_dir)."""
    dump_transitions: bool = False
    """Keep ``(obs, action, reward, terminated, truncated)`` per step in the records."""
    keep_records: bool = True
    """Hand the records back in memory (False: on disk only; memory stays flat)."""
    keep_agents: bool = True
    """Hand each run's final agent back."""
    metrics_flush_every: int | None = None
    """Records per chunk of the metrics streams."""
    evaluate: bool = False
    """Evaluate the agent greedily on a separate env, every ``eval_freq`` and at the end."""
    eval_freq: int | None = None
    """Evaluate every this many env steps (step budget) or episodes (episode budget); None: at the end only."""
    eval_episodes: int = 10
    """Complete episodes per evaluation."""
    record_video: int | None = None
    """Film the first episode of every this-many-th evaluation (``exp_dir/videos/run{i}/*.mp4``)."""
    frames_trigger: Any = None
    """Training episodes that keep their frames when the env renders: ``k`` (episodes ``k, 2k, ...``), a
    callable ``episode_index -> bool``, or None (every one)."""
    hooks: tuple[Any, ...] = ()
    """Objects with any of ``on_run_start``, ``on_step``, ``on_episodes``, ``on_episode_end``, ``on_eval``,
    ``on_checkpoint``, ``on_run_end`` (see :mod:`online_trainer.hooks`); each run gets its own copy of each."""
    stats_window: int = 100
    """Episodes averaged into the rolling return and length logged under ``stats/run_{i}``."""
    stats_every_steps: int | None = None
    """Log SPS, rolling means and timing shares every this many env steps; None: about every 10 seconds."""
    score: str = "return"
    """What evaluations, the progress display and the analysis report: ``return`` (the sum of the rewards the agent
    learns from) or ``raw`` (the episode statistics of a ``RecordEpisodeStatistics`` inside the env's wrappers)."""
    has_exp_dir: bool = True
    """Whether the experiment has a directory (options that write files need one)."""
    budget: Budget = field(init=False, repr=False)
    """The budget the two first fields describe."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "budget", validation.budget(self.num_episodes, self.total_steps))
        validation.optional_positive_int("checkpoint_freq", self.checkpoint_freq)
        validation.optional_positive_int("keep_checkpoints", self.keep_checkpoints)
        if not isinstance(self.checkpoint_buffers, bool):
            raise ValueError(f"checkpoint_buffers must be True or False, but got "
                             f"checkpoint_buffers={self.checkpoint_buffers!r}.")
        if self.keep_checkpoints and self.checkpoint_freq is None:
            raise ValueError(f"keep_checkpoints={self.keep_checkpoints!r} applies to periodic checkpoints, but "
                             "checkpoint_freq is None: pass checkpoint_freq=... too, or drop keep_checkpoints.")
        validation.optional_positive_int("metrics_flush_every", self.metrics_flush_every)
        validation.optional_positive_int("eval_freq", self.eval_freq)
        validation.positive_int("eval_episodes", self.eval_episodes)
        object.__setattr__(self, "hooks", check_hooks(self.hooks, self.eval_freq))
        validation.positive_int("stats_window", self.stats_window)
        validation.optional_positive_int("stats_every_steps", self.stats_every_steps)
        raw_scores.check_score(self.score)
        validation.optional_positive_int("record_video", self.record_video)
        object.__setattr__(self, "frames_trigger", validation.episode_trigger("frames_trigger", self.frames_trigger))
        validation.needs_exp_dir(self.has_exp_dir or None, record_video=self.record_video)
        if self.record_video is not None and not self.evaluate:
            raise ValueError(f"record_video={self.record_video} films evaluation episodes, but evaluation is off: "
                             "pass eval_freq=... (and an eval_env made with render_mode='rgb_array').")
        validation.needs_exp_dir(self.has_exp_dir or None, dump_metrics=self.dump_metrics,
                                 checkpoint_freq=self.checkpoint_freq, checkpoint_buffers=self.checkpoint_buffers)
        if not self.keep_records and not self.dump_metrics:
            raise ValueError("keep_records=False needs dump_metrics=True and an exp_dir, or the records would be lost.")

    @property
    def num_eval_episodes(self) -> int:
        """Episodes per evaluation; 0 when the runs are not evaluated."""
        return self.eval_episodes if self.evaluate else 0
